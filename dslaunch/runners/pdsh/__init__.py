"""The pdsh runner: one ``pdsh -R ssh`` for every node, its output split back per host.

- ``invocation``: pdsh's command line, environment and labels (pure), and its start;
- ``demux``: pdsh's one stdout and stderr split back per host;
- ``runner``: an agent per host for an attempt, stopped and signalled by a short ssh each;
- ``dialback``: with restarts, job agents and dial back to the launcher, which carries every message.
"""
