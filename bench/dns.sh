#!/usr/bin/env bash
# The cluster DNS under dnsperf: `winnet dns` holding 10,000 Services (+ EndpointSlices, from
# manifests) against Knot DNS serving the same records from a zone file, same run, same query
# mix (hits, NXDOMAIN, AAAA NODATA); then the time from an EndpointSlice rewrite to the changed
# answer, over ~50 changes. Installs dnsperf/knot if missing (Debian). Everything is on
# loopback and removed on exit. Usage: bench/dns.sh [SECONDS]  (prints a Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-15}"
services=10000
changes=50
need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v knotd >/dev/null || need+=(knot)
command -v dig >/dev/null || need+=(bind9-dnsutils)
if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "missing ${need[*]}: run as root or apt-get install them" >&2; exit 1; }
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi

cargo build --release --quiet -p winnet --bin winnet
winnet="$PWD/target/release/winnet"

work="$(mktemp -d /tmp/wnt-dns-bench.XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dns_port="$(free_port)"
knot_port="$(free_port)"

# --- the same cluster as manifests, as a zone file, and the query mix
mkdir -p "$work/manifests" "$work/knot"
python3 - "$work" "$services" <<'PY'
import random, sys
work, n = sys.argv[1], int(sys.argv[2])
svc, sl, zone, queries = [], [], [], []
zone.append("$ORIGIN cluster.local.\n$TTL 30\n@ IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30\n@ IN NS ns.dns.cluster.local.\nns.dns IN A 10.96.0.10\n")
for i in range(n):
    ns, name = f"ns-{i % 50}", f"svc-{i}"
    ip = f"10.{96 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    svc.append(f"kind: Service\napiVersion: v1\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{clusterIP: {ip}, ports: [{{name: http, port: 80}}]}}\n")
    eps = "".join(f"- {{addresses: [10.{128 + i // 65536}.{(i // 256) % 256}.{i % 256 if k == 0 else (i + 97 * k) % 256}], conditions: {{ready: true}}}}\n" for k in range(3))
    sl.append(f"kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n{eps}")
    zone.append(f"{name}.{ns}.svc IN A {ip}\n")
for i in range(30000):
    k, r = random.randrange(n), random.random()
    ns = f"ns-{k % 50}"
    if r < 0.7:
        queries.append(f"svc-{k}.{ns}.svc.cluster.local A")
    elif r < 0.85:
        queries.append(f"nope-{k}.{ns}.svc.cluster.local A")
    else:
        queries.append(f"svc-{k}.{ns}.svc.cluster.local AAAA")
open(f"{work}/manifests/services.yaml", "w").write("---\n".join(svc))
open(f"{work}/manifests/slices.yaml", "w").write("---\n".join(sl))
open(f"{work}/knot/cluster.local.zone", "w").write("".join(zone))
open(f"{work}/queries", "w").write("\n".join(queries) + "\n")
PY
change_file="$work/manifests/zz-change.yaml"
write_change() { # IP: the changing Service's one endpoint
    printf '%s\n' "kind: Service" "apiVersion: v1" "metadata: {name: moving, namespace: ns-0}" "spec: {clusterIP: None}" "---" \
        "kind: EndpointSlice" "apiVersion: discovery.k8s.io/v1" \
        "metadata: {name: moving-1, namespace: ns-0, labels: {kubernetes.io/service-name: moving}}" \
        "addressType: IPv4" "endpoints:" "- {addresses: [$1]}" > "$change_file.tmp"
    mv "$change_file.tmp" "$change_file"
}
write_change 10.200.0.1

cat > "$work/knot/knot.conf" <<EOF
server:
  rundir: "$work/knot"
  listen: 127.0.0.1@$knot_port
database:
  storage: "$work/knot"
control:
  listen: "$work/knot/knot.sock"
log:
  - target: stderr
    any: error
zone:
  - domain: cluster.local
    file: "$work/knot/cluster.local.zone"
    journal-content: none
    zonefile-load: whole
EOF

wait_answer() { # port name
    for _ in $(seq 1 600); do
        dig @127.0.0.1 -p "$1" +time=1 +tries=1 +short "$2" A 2>/dev/null | grep -q . && return 0
        sleep 0.1
    done
    echo "no answer for $2 on port $1" >&2; exit 1
}

perf() { # port -> "qps p50_ms p99_ms lost%"
    dnsperf -s 127.0.0.1 -p "$1" -d "$work/queries" -l "$secs" -c 8 -q 200 -v 2>/dev/null > "$work/perf.out"
    python3 - "$work/perf.out" <<'PY'
import sys
lat, qps, lost = [], 0.0, "?"
for line in open(sys.argv[1]):
    if line.startswith("> "):
        try:
            lat.append(float(line.split()[-1]))
        except ValueError:
            pass  # a query that timed out carries no latency
    elif "Queries per second:" in line:
        qps = float(line.split()[-1])
    elif "Queries lost:" in line:
        lost = line.split()[-1].strip("()")
lat.sort()
p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000
print(f"{qps:.0f} {p(0.5):.3f} {p(0.99):.3f} {lost}")
PY
}

"$winnet" dns --listen "127.0.0.1:$dns_port" --manifests "$work/manifests" --upstream 127.0.0.1:9 2>"$work/winnet.log" &
pids+=($!)
start=$(date +%s.%N)
wait_answer "$dns_port" svc-9999.ns-49.svc.cluster.local
load_s=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
knotd -c "$work/knot/knot.conf" 2>"$work/knot.log" &
pids+=($!)
wait_answer "$knot_port" svc-9999.ns-49.svc.cluster.local

read -r w_qps w_p50 w_p99 w_lost < <(perf "$dns_port")
read -r k_qps k_p50 k_p99 k_lost < <(perf "$knot_port")
ratio=$(python3 -c "print(f'{$w_qps / $k_qps:.2f}')")
rss=$(awk '/VmRSS/ {print int($2/1024)}' "/proc/${pids[0]}/status")

# --- an EndpointSlice rewrite until the answer shows it, $changes times
change=$(python3 - "$dns_port" "$changes" "$change_file" <<'PY'
import os, socket, struct, sys, time
port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
qname = b"".join(bytes([len(l)]) + l for l in b"moving.ns-0.svc.cluster.local".split(b".")) + b"\0"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
def answer_ip():
    qid = os.getpid() & 0xffff
    s.sendto(struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1), ("127.0.0.1", port))
    data = s.recv(4096)
    if struct.unpack(">H", data[6:8])[0] == 0:
        return None
    return ".".join(str(b) for b in data[-4:])
samples = []
for i in range(n):
    ip = f"10.200.{1 + i // 250}.{1 + i % 250}"
    text = open(path).read().rsplit("[", 1)[0] + f"[{ip}]}}\n"
    open(path + ".tmp", "w").write(text)
    t0 = time.monotonic()
    os.rename(path + ".tmp", path)
    while answer_ip() != ip:
        time.sleep(0.0005)
    samples.append((time.monotonic() - t0) * 1000)
    time.sleep(0.05)
samples.sort()
print(f"{samples[len(samples)//2]:.1f} {samples[min(len(samples)-1, int(0.99*len(samples)))]:.1f} {samples[-1]:.1f}")
PY
)
read -r c_p50 c_p99 c_max <<<"$change"

echo "| what | winnet dns | Knot DNS (same run) | ratio | budget |"
echo "|---|---|---|---|---|"
echo "| queries/s, $services Services (70% A hits, 15% NXDOMAIN, 15% AAAA NODATA), dnsperf -c 8 -q 200, ${secs}s | $w_qps | $k_qps | $ratio | >= 50,000 and >= 0.5 |"
echo "| latency under that load, p50 / p99; queries lost | $w_p50 / $w_p99 ms; $w_lost | $k_p50 / $k_p99 ms; $k_lost | — | — |"
echo "| EndpointSlice rewrite -> changed answer, $changes changes, p50 / p99 / max | $c_p50 / $c_p99 / $c_max ms | — | — | p99 < 100 ms |"
echo "| manifests load to first answer (20,000 objects); RSS after the run | ${load_s} s; ${rss} MiB | — | — | — |"
