"""The viewer's pages on the server: one module per page, each with its routes.

Each module builds its page's JSON from the catalog
(:class:`agentkit.view._catalog.Catalog`) and serves it under ``/api/``
(the browser draws the page: ``static/pages/``), with the live stream the
page follows where it has one:

* :mod:`.index`: the runs page (``/``): every run and job (``/api/runs``);
* :mod:`.run`: a run (``/run/RUN``): its header, rollouts, tasks × rollouts;
* :mod:`.rollout`: a rollout (``/run/RUN/rollout/ID``): its record, events,
  model calls and files;
* :mod:`.files`: a run's files (``/files/RUN/PATH``), sent so that the
  browser never runs them;
* :mod:`.job`: a job (``/job/JOB``): its cells, leaderboard and heat map;
* :mod:`.compare`: runs compared (``/compare/A/B/...``);
* :mod:`.charts`: the distributions the run, job and compare pages draw.

:mod:`agentkit.view._server` adds every module's ``routes``.
"""
