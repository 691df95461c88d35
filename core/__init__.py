"""The broker's pure core: its vocabulary (messages, clients, reasons), shared by the store,
the router, the actors, the hooks and Spark, with no I/O and no actor runtime."""
