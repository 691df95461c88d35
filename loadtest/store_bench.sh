#!/usr/bin/env bash
# Store on vs off: QoS 1 fan-in (10 publishers -> 1 subscriber) to a PERSISTENT-session
# subscriber, so every delivery goes through the store's write-ahead (docs/persistence.md).
# ../shared/bench's generator always connects with clean session 1; this builds a copy of it
# whose CONNECT says clean session 0 (one flag byte) into loadtest/results/tmp, then runs the
# broker with [store] kind sqlite and none, interleaved, REPS times (default 3).
# Output: one JSON line per run in loadtest/results/store-onoff-<UTC>.jsonl. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
PORT=${PORT:-19860}
BUILD=loadtest/results/tmp/persistent-bench
mkdir -p "$BUILD"
sed 's|"\\x00\\x04MQTT\\x04\\x02", 8); /\* level 4, clean session \*/|"\\x00\\x04MQTT\\x04\\x00", 8); /* level 4, clean session 0 */|' \
  ../shared/bench/mqttbench.c > "$BUILD/mqttbench.c"
grep -q 'clean session 0' "$BUILD/mqttbench.c" || { echo "could not patch the generator's CONNECT flags" >&2; exit 1; }
gcc -O2 -o "$BUILD/mqttbench" "$BUILD/mqttbench.c" -lm
OUT=loadtest/results/store-onoff-$(date -u +%Y%m%dT%H%M%SZ).jsonl
for rep in $(seq 1 "$REPS"); do
  if (( rep % 2 )); then order="sqlite none"; else order="none sqlite"; fi
  for store in $order; do
    dir=$(mktemp -d)
    .venv/bin/python -m actors.main --port "$PORT" --log-level warning \
      --config loadtest/bench-broker.toml --store "$store" --data-dir "$dir/data" &
    broker=$!
    sleep 1.5
    timeout 120 "$BUILD/mqttbench" fanin --port "$PORT" --pubs 10 --qos 1 --sub-qos 1 --window 50 \
      --max-pub-time 10 --label "store-$store" --broker-pid "$broker" > "$dir/run.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.update(store=sys.argv[2], rep=int(sys.argv[3])); print(json.dumps(d))" \
      "$dir/run.json" "$store" "$rep" >> "$OUT"
    kill "$broker"; wait "$broker" || true
    rm -rf "$dir"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
for store in ("sqlite", "none"):
    rates = [r["recv_rate"] for r in runs if r["store"] == store]
    acks = [r["ack_rate"] for r in runs if r["store"] == store]
    print(f"store {store:6}: delivered/s median {statistics.median(rates):,.0f} {sorted(rates)}"
          f"  PUBACKs/s median {statistics.median(acks):,.0f}")
PY
echo "raw runs: $OUT"
