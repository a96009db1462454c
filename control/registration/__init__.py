"""App registration: the feasibility checks made as the epoch plans
(:mod:`~control.registration.checks`), the admission reserve search for a ``shed_target``
(:mod:`~control.registration.reserve`) and the registry that stores revisions
(:mod:`~control.registration.store`); :mod:`~control.registration.validate` puts the checks and the
reserve search together with the user's spec (:mod:`control.spec`: parse and check every key,
resolve the profiles; it sits below the planning problems built from it). Nothing is imported here
so that importing one part stays cheap."""
