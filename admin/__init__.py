"""The broker's operations surface on one HTTP listener: the admin API, `/metrics` and the
dashboard (docs/operations.md). Served by gevent's pywsgi inside the broker worker."""
