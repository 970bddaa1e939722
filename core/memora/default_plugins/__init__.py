"""Built-in plugins, registered exactly like third-party ones (see ``memora.plugins``)."""
