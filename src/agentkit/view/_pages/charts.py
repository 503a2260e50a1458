"""The charts of a run's, a job's and a comparison's pages (``/api/charts?runs=A,B``).

The distributions of reward, duration, tokens and cost of each run, binned
alike by :mod:`agentkit.view._charts` (a few hundred numbers per chart
however large the runs are); each run's values are read once and kept while
it does not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from agentkit.view._catalog import Catalog, distinct
from agentkit.view._charts import distributions
from agentkit.view._http import CATALOG, in_worker, json_response
from agentkit.view._paths import NotFound

__all__ = ["charts", "routes"]

routes = web.RouteTableDef()


def charts(catalog: Catalog, names: Sequence[str]) -> dict[str, Any]:
    """The distributions of reward, duration, tokens and cost of each run, binned alike."""
    names = distinct(names)
    if not names:
        raise NotFound("no run to chart: give ?runs=NAME,...")
    return distributions([(name, catalog.run(name).values()) for name in names])


@routes.get("/api/charts")
async def _charts(request: web.Request) -> web.StreamResponse:
    names = (request.query.get("runs") or "").split(",")
    return json_response(await in_worker(request, charts, request.app[CATALOG], names))
