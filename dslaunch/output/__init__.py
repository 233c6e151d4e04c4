"""Rank output on both sides: prefixes, relays, bounded sinks, console collapse, the node agent's pump
and the launcher's lanes. Imports only the plan and the wire."""
