#!/bin/sh
# A trivial rank for the console-collapse tests: one warning on stderr, the same on every rank (LINE=own: its
# own). With READY_DIR and GATE (a FIFO), it says it is ready and waits for the test to open the gate, so the
# ranks of every host print at once. With FAIL_RANK, that rank prints just after the others, waits until they
# all have, and fails; the others wait to be stopped and then say so.
if [ "${LINE:-same}" = own ]; then
  text="UserWarning: rank $RANK has a warning of its own"
else
  text="UserWarning: the same on every rank"
fi
if [ -n "$GATE" ]; then
  : > "$READY_DIR/$RANK"
  : < "$GATE"
fi
if [ -z "$FAIL_RANK" ]; then
  echo "$text" >&2
  exit 0
fi
mkdir -p "$READY_DIR/printed"
if [ "$RANK" = "$FAIL_RANK" ]; then
  sleep 0.05
  echo "$text" >&2
  while [ "$(ls "$READY_DIR/printed" | wc -l)" -lt $((WORLD_SIZE - 1)) ]; do sleep 0.05; done
  exit 3
fi
trap 'echo "rank $RANK stopping" >&2; exit 0' TERM
echo "$text" >&2
: > "$READY_DIR/printed/$RANK"
sleep 60 &
wait
