"""``dslaunch --report LOGDIR``: the launch timeline of a finished job, read back from its ``--log-dir`` files.

Pure and stdlib only: ``timeline`` parses the ``phase`` records (dslaunch/logs/phases.py), ``table`` summarises them
per phase, ``page`` renders the self-contained ``timeline.html``. The CLI option is dslaunch/cli/report_option.py.
"""
