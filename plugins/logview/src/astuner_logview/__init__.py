"""astuner-logview: the rollout log viewer, a local web page over experiment records.

`astuner logview PATH` (or `astuner_logview.server.start_logview(PATH)`)
serves, on 127.0.0.1, the runs under PATH, their trajectories (filterable
and paged, by agent too, with each agent's reward), each trajectory's
conversation and its training tokens coloured by loss mask and shaded by
log-prob (all agents, or one at a time, each call with its agent and
adapter), and the run's metrics as charts; `astuner run --with-logview`
serves the run's own folder while it runs. The page is plain JavaScript and
CSS shipped in `static/`; nothing is loaded from elsewhere.

Nothing is imported here: the plugin's entry point (`plugin`) loads with
every `astuner` command, and the server (fastapi) only when a viewer starts.
"""
