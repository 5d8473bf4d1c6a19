"""The rollout log viewer: a local web page over experiment records.

`astuner logview PATH` (or `start_logview(PATH)`) serves, on 127.0.0.1,
the runs under PATH, their trajectories (filterable and paged, by agent
too, with each agent's reward), each trajectory's conversation and its
training tokens coloured by loss mask and shaded by log-prob (all agents, or
one at a time, each call with its agent and adapter), and the run's metrics
as charts. The page is plain
JavaScript and CSS shipped in `static/`; nothing is loaded from elsewhere.
"""

from astuner.logview.app import create_app
from astuner.logview.server import DEFAULT_PORT, LogviewServer, start_logview

__all__ = ["DEFAULT_PORT", "LogviewServer", "create_app", "start_logview"]
