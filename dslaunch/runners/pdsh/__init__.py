"""The pdsh runner: one ``pdsh -R ssh`` for every node, its output split back per host."""
