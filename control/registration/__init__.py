"""App registration, in four parts: the user's spec (:mod:`~control.registration.spec`: parse and
check every key, resolve the profiles), the feasibility checks made as the epoch plans
(:mod:`~control.registration.checks`), the admission reserve search for a ``shed_target``
(:mod:`~control.registration.reserve`), and the registry that stores revisions
(:mod:`~control.registration.store`); :mod:`~control.registration.validate` puts the first three
together. Nothing is imported here so that importing one part stays cheap."""
