"""The node agent: spawns and supervises one node's ranks (never imports torch).

Run as ``python -m dslaunch.agent --node-rank N``; the launch plan arrives as
the first line of stdin (or ``--plan-b64``), and the rest of stdin is the
control channel: ``stop`` or end-of-file tears the node down.
"""
