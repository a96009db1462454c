"""Load tests of the front API (locust): camera users per demo app, load shapes, and the analysis of
a run. ``loadtest.rates`` and ``loadtest.analysis`` are pure and import no locust (locust
monkey-patches the process on import); ``loadtest.users``, ``loadtest.shapes`` and
``loadtest/locustfile.py`` run inside locust."""
