"""The shared data-plane core: schema, routing, settings, errors and every AWS adapter."""
