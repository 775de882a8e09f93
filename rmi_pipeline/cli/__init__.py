"""The `rmi` command: what a person types. `main.py` is the entry point; each other module is one concern of it."""
