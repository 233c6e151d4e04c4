"""Node agents that live for the job, whatever carries them (``--max-restarts`` > 0): an attempt on one
(``attempt.Attempt``), the job's agents by host (``attempt.LiveAgents``) and the spare hosts standing by
(``spares.Spares``). The ssh runner's agents talk over their channel (runners/ssh/channel_agent.py), the pdsh runner's
over a connection they dial back to the launcher (runners/pdsh/dialback.py)."""
