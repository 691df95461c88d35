"""Small example plugins, meant to be read and copied (docs/plugins.md explains them)."""
