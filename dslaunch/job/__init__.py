"""The job core, transport-free: the runner protocol, launcher-side supervision (state, loop, hangs),
summaries, restarts and the elastic choice of hosts. Runners (dslaunch/runners/) plug into it."""
