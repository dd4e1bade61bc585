#!/usr/bin/env bash
# Every performance budget of DESIGN §6 that a quick run can measure, in one table:
#   measure | figure | same-run baseline or floor | budget | met / missed
# Each bench runs in its quick variant (fewer seconds, fewer rounds: under about a minute
# each once built); budgets for what is not built yet are "not built" rows, never faked.
# Exit status: 1 when a figure is worse than twice its budget (a gross regression, not
# noise: "FAILED" in the table), 2 when a bench did not run to its figures, else 0.
# As root it also runs the benches over network namespaces (CNI, flannel, pod -> pod),
# installing what they use from Debian when missing; without root those rows read
# "skipped (needs root)". Everything the benches start is stopped and removed on exit.
#
# Usage: bench/check.sh [GROUP...]
#   groups: switch proxy policy dns cni flannel dataplane (default: all). The benches are built
#   first (`cargo bench --no-run`); that time is printed apart from the runs'.
set -uo pipefail
cd "$(dirname "$0")/.."
groups="${*:-switch proxy policy dns cni flannel dataplane}"
work="$(mktemp -d /tmp/wnt-check.XXXXXX)"
bench_pid=""
cleanup() {
    # A bench still running (interrupted) is stopped as a timeout stops it; each removes
    # what it made when it ends, and a killed one's namespaces are swept below.
    if [ -n "$bench_pid" ]; then kill -TERM "$bench_pid" 2>/dev/null; wait "$bench_pid" 2>/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
root=0
[ "$(id -u)" = 0 ] && root=1
load() { cut -d' ' -f1-3 /proc/loadavg; }
want() { case " $groups " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# Namespaces a bench killed by its timeout may have left (each bench's own prefixes).
sweep() {
    [ "$root" = 1 ] || return 0
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^($1)" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}

# run NAME SECONDS [VAR=VALUE...] COMMAND...: the output in $work/NAME.log, the status in
# $work/NAME.rc, the load average beside it in $work/NAME.load.
run() {
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s)
    echo "== $name (load $(load)): $*" >&2
    echo "$(load)" >"$work/$name.load"
    env "$@" >"$work/$name.log" 2>&1 &
    bench_pid=$!
    # The bench's own timeout: SIGTERM lets it clean up; a bench that ignores it is killed.
    (sleep "$limit" && kill -TERM "$bench_pid" 2>/dev/null && sleep 20 && kill -KILL "$bench_pid" 2>/dev/null) &
    local timer=$!
    wait "$bench_pid"
    rc=$?
    kill "$timer" 2>/dev/null
    wait "$timer" 2>/dev/null
    bench_pid=""
    echo "$rc" >"$work/$name.rc"
    echo "   $name: exit $rc after $(($(date +%s) - t0)) s" >&2
    [ "$rc" = 0 ] || tail -5 "$work/$name.log" >&2
}

# --- build every bench first, so that the runs' times are the runs'. The runs start the
# executables this build made (never `cargo bench` again: a run naming one package resolves
# features for it alone and rebuilds what the union built differently).
# In the release profile (the bench profile's settings are the same): the demo's and the scripts'
# `cargo build --release` then share every artifact with it; the bench profile is stored apart.
build=(cargo bench --locked --no-run --quiet --profile release --message-format=json-render-diagnostics)
want switch && build+=(-p vfp --bench fastpath --bench acl)
want proxy && build+=(-p proxy --bench program)
want policy && build+=(-p policy --bench program)
want dns && build+=(-p dns --bench change)
[ "$root" = 1 ] && want cni && build+=(-p winnet --bench cni)
[ "$root" = 1 ] && want flannel && build+=(-p flannel --bench flanneld)
t0=$(date +%s)
echo "== building the benches (load $(load))" >&2
"${build[@]}" >"$work/build.json" || exit 2
# bench SRC: the executable of the bench whose source is SRC (from the repository's root).
bench() {
    python3 - "$work/build.json" "$1" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and "bench" in t.get("kind", []) and os.path.normpath(t.get("src_path", "")).endswith("/" + sys.argv[2]) and m.get("executable"):
        print(m["executable"])
        break
else:
    sys.exit(f"the build made no bench {sys.argv[2]}")
PY
}
if want dns || { [ "$root" = 1 ] && want dataplane; }; then
    cargo build --locked --release --quiet -p winnet --bin winnet --example connrate >&2 || exit 2
fi
built=$(($(date +%s) - t0))
t0=$(date +%s)

want switch && run switch 150 FASTPATH_QUICK=1 "$(bench crates/vfp/benches/fastpath.rs)" --bench \
    --warm-up-time 1 --measurement-time 1 --sample-size 10 --noplot
want switch && run switch-acl 120 "$(bench crates/vfp/benches/acl.rs)" --bench \
    --warm-up-time 1 --measurement-time 1 --sample-size 10 --noplot
want proxy && run proxy 240 PROXY_BENCH_SIZES=2000 PROXY_BENCH_ROUNDS=40 \
    "$(bench crates/proxy/benches/program.rs)" --bench
want policy && run policy 150 POLICY_BENCH_ROUNDS=40 "$(bench crates/policy/benches/program.rs)" --bench
if want dns; then
    run dns-change 120 DNS_BENCH_CHANGES=100 "$(bench crates/dns/benches/change.rs)" --bench
    run dns 150 bench/dns.sh 3
fi
if [ "$root" = 1 ]; then
    if want cni; then
        run cni 240 CNI_BENCH_N=40 CNI_BENCH_SERVICES=2000 "$(bench crates/cni/benches/cni.rs)" --bench
        [ "$(cat "$work/cni.rc")" = 0 ] || sweep winnet-cnibench-
    fi
    if want flannel; then
        run flannel 150 FLANNEL_BENCH_ONLY=lease FLANNEL_BENCH_ROUNDS=20 \
            "$(bench crates/flannel/benches/flanneld.rs)" --bench
        [ "$(cat "$work/flannel.rc")" = 0 ] || sweep wnt-flb-
    fi
    if want dataplane; then
        peers="kernel winnet"
        command -v ovs-vswitchd >/dev/null && peers="kernel ovs winnet"
        run dataplane 240 PEERS="$peers" bench/dataplane.sh 3
        [ "$(cat "$work/dataplane.rc")" = 0 ] || sweep "wb[0-9]+-"
    fi
fi
ran=$(($(date +%s) - t0))

python3 - "$work" "$groups" "$root" "$built" "$ran" <<'PY'
import os, re, sys

work, groups, root, built, ran = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1", sys.argv[4], sys.argv[5]
rows, failed, broken = [], False, False

def log(name):
    p = os.path.join(work, name + ".log")
    return open(p, errors="replace").read() if os.path.exists(p) else None

def ran_ok(name):
    p = os.path.join(work, name + ".rc")
    return os.path.exists(p) and open(p).read().strip() == "0"

def load(name):
    p = os.path.join(work, name + ".load")
    return open(p).read().strip() if os.path.exists(p) else ""

def num(pattern, text, group=1):
    m = re.search(pattern, text or "", re.M)
    return float(m.group(group).replace(",", "")) if m else None

def row(group, measure, figure, unit, floor, budget, better, limit, fmt="{:.2f}", floor_value=None):
    """better: "<" (smaller is better) or ">" (larger is better); limit: the budget's number,
    or None for a figure without a budget; floor_value: the same measure's floor in this run,
    when it has one (a latency). A figure past twice its budget fails, unless the floor alone
    is past the budget: then the machine was too loaded to tell."""
    global failed, broken
    if group not in groups:
        return
    needs_root = group in ("cni", "flannel", "dataplane")
    if needs_root and not root:
        rows.append((measure, "skipped (needs root)", "—", budget, "—"))
        return
    if figure is None:
        broken = True
        rows.append((measure, "no figure: the bench did not run to it", "—", budget, "FAILED TO RUN"))
        return
    text = fmt.format(figure) + unit
    if limit is None:
        verdict = "—"
    else:
        met = figure <= limit if better == "<" else figure >= limit
        gross = figure > 2 * limit if better == "<" else figure < limit / 2
        loaded = floor_value is not None and (floor_value > limit if better == "<" else floor_value < limit)
        if met:
            verdict = "met"
        elif gross and loaded:
            verdict = "missed (the floor alone is past the budget: machine too loaded to tell)"
        elif gross:
            verdict = "FAILED (worse than 2x the budget)"
            failed = True
        else:
            verdict = "missed"
    rows.append((measure, text, floor, budget, verdict))

def not_built(measure, budget):
    # Only in a run of every group: a run of some groups is about those.
    if set(groups) >= {"switch", "proxy", "policy", "dns", "cni", "flannel", "dataplane"}:
        rows.append((measure, "not built", "—", budget, "—"))

# --- the switch (criterion: the middle of each `thrpt:` range)
def thrpt(text, bench):
    m = re.search(re.escape(bench) + r"[\s\S]*?thrpt:\s*\[\S+ \S+ (\S+) (\S+)/s", text or "")
    if not m:
        return None
    scale = {"elem": 1, "Kelem": 1e3, "Melem": 1e6, "Gelem": 1e9}.get(m.group(2), None)
    return float(m.group(1)) * scale if scale else None

sw = log("switch")
fast, floor, new = (thrpt(sw, b) for b in ("switch/fast_path_10k_lbs_100k_flows", "switch/floor_parse_lookup_rewrite", "switch/new_flows_10k_lbs"))
l = f"load {load('switch')}"
row("switch", "fast path (flow-table hit), 10k LBs, 1 core", fast and fast / 1e6, " Mpps", f"floor {floor / 1e6:.2f} Mpps; {l}" if floor else l, ">= 10 Mpps", ">", 10)
row("switch", "fast path ÷ floor bench (same run)", fast and floor and fast / floor, "", "—", ">= 0.5", ">", 0.5)
row("switch", "slow path (new flow), 10k LBs", new and new / 1e3, "k flows/s", l, ">= 500k flows/s", ">", 500, "{:.0f}")
row("switch", "memory per cached flow", num(r"([\d.]+) bytes/connection", sw), " bytes", "—", "<= 256 bytes", "<", 256, "{:.1f}")
# crates/vfp/benches/acl.rs: each pair's best runs, taken in turn, as a ratio of rates
acl = log("switch-acl")
l = f"load {load('switch-acl')}"
def acl_pair(what):
    m = re.search(re.escape(what) + r": no rules ([\d.]+) ns/packet \((\d+) k/s\), 1,000 ACL rules ([\d.]+) ns/packet \((\d+) k/s\): ratio to none ([\d.]+)", acl or "")
    return (float(m.group(5)), f"none {int(m.group(2)) / 1e3:.2f} M/s, with them {int(m.group(4)) / 1e3:.2f} M/s; {l}") if m else (None, l)
ratio, floor = acl_pair("fast path (flow-table hit)")
row("switch", "fast path with 1,000 ACL rules on a port (ratio to none)", ratio, "", floor, "measured", ">", None)
ratio, floor = acl_pair("new connections, inbound")
row("switch", "new connections/s with 1,000 ACL rules, inbound (ratio to none)", ratio, "", floor, "measured", ">", None)
ratio, floor = acl_pair("new connections, outbound")
row("switch", "new connections/s with 1,000 ACL rules, outbound (ratio to none)", ratio, "", floor, "measured", ">", None)

# --- pod -> pod through TAPs (bench/dataplane.sh: its per-round lines `  PEER MEASURE: v...`)
dp = log("dataplane")
def dpv(peer, m):
    return num(rf"^  {peer} {m}: ([\d.]+)", dp)
k1, w1, o1 = dpv("kernel", "tcp1"), dpv("winnet", "tcp1"), dpv("ovs", "tcp1")
l = f"load {load('dataplane')}"
row("dataplane", "TCP pod -> pod, one stream, user-space path ÷ veth+bridge", w1 and k1 and w1 / k1, "", f"veth+bridge {k1} Gbit/s; {l}" if k1 else l, ">= 0.9", ">", 0.9)
if "dataplane" in groups and root and o1 is None and dp is not None:
    rows.append(("the same ÷ Open vSwitch userspace", "not measured (no Open vSwitch here)", "—", "> 1", "—"))
else:
    row("dataplane", "the same ÷ Open vSwitch userspace", w1 and o1 and w1 / o1, "", f"OVS {o1} Gbit/s" if o1 else "—", "> 1", ">", 1.0)
vip, cps = dpv("winnet", "vip"), dpv("winnet", "cps")
row("dataplane", "ClusterIP connections/s ÷ to the pod's own address", vip and cps and vip / cps, "", f"pod address {cps:.0f}/s" if cps else "—", ">= 0.8", ">", 0.8)
for what, budget in (
    ("flow offload (eBPF): one stream ÷ veth+bridge", ">= 0.95"),
    ("flow offload: 4 streams ÷ veth+bridge", ">= 0.9"),
    ("flow offload: UDP round trip p50 ÷ veth+bridge", "<= 1.3x"),
    ("flow offload: connections/s ÷ veth+bridge", ">= 0.9"),
    ("flow offload over VXLAN ÷ the kernel's VXLAN", ">= 0.9"),
):
    not_built(what, budget)
not_built("in-memory cluster, 100 Windows nodes x 100 pods, 2,000 Services", "< 60 s, < 8 GiB")

# --- kube-proxy (crates/proxy/benches/program.rs)
px = log("proxy")
l = f"load {load('proxy')}"
prog, base = num(r"program 2000 Services.*?: ([\d.]+) s through", px), num(r"program 2000 Services.*baseline.*?: ([\d.]+) s;", px)
row("proxy", "program 2,000 Services x 5 endpoints, manifests to HNS", prog, " s", f"LB creates alone {base:.2f} s; {l}" if base else l, "< 5 s", "<", 5)
def incremental(pattern):
    # A bench from before the floors were measured prints the figure alone: it is judged alone.
    m = re.search(pattern + r".*?: p50 ([\d.]+) ms, p99 ([\d.]+) ms(?:; floor.*?: p50 ([\d.]+) ms, p99 ([\d.]+) ms)?", px or "")
    if not m:
        return None, "—", None
    if m.group(3) is None:
        return float(m.group(2)), f"p50 {m.group(1)} ms; no floor in this bench; {l}", None
    return float(m.group(2)), f"p50 {m.group(1)} ms; floor (the same HNS calls alone) p50 {m.group(3)} / p99 {m.group(4)} ms; {l}", float(m.group(4))
p99, floor, fv = incremental(r"one endpoint change .*delete\+create on ws2022")
row("proxy", "one endpoint change, 2,000 Services, ws2022 (delete + create), p99", p99, " ms", floor, "< 20 ms", "<", 20, floor_value=fv)
p99, floor, fv = incremental(r"one endpoint change .*ModifyLoadBalancer on unrestricted")
row("proxy", "one endpoint change, 2,000 Services, unrestricted (ModifyLoadBalancer), p99", p99, " ms", floor, "< 10 ms", "<", 10, floor_value=fv)
p99, floor, fv = incremental(r"one Service added / removed")
row("proxy", "one Service added or removed, 2,000 Services, p99", p99, " ms", floor, "< 20 ms", "<", 20, floor_value=fv)

# --- the NetworkPolicy agent (crates/policy/benches/program.rs)
po = log("policy")
l = f"load {load('policy')}"
for what, windows in (("500 policies on one pod", "Windows (Azure NPM): 2 h one by one, 70 s batched"), ("1,500 pods x 10 policies", "Windows (Azure NPM): 3 h, 8 min after its fix")):
    for style in ("calico", "npm"):
        m = re.search(re.escape(f"{what}, {style}: first sync ") + r"([\d.]+) ms.*?baseline.*? ([\d.]+) ms; ratio ([\d.]+)", po or "")
        row("policy", f"NetworkPolicy: {what}, {style} style, to HNS", m and float(m.group(1)), " ms", f"the same lists straight to hnsd {m.group(2)} ms (x{m.group(3)}); {windows}; {l}" if m else l, "beside Windows", "<", None, "{:.1f}")
for style in ("calico", "npm"):
    m = re.search(re.escape(f"one label change, 1,500 pods x 10 policies, {style}: ") + r"p50 ([\d.]+) ms, p99 ([\d.]+) ms.*?floor.*?p50 ([\d.]+) ms, p99 ([\d.]+) ms", po or "")
    row("policy", f"NetworkPolicy: one pod label change, 1,500 pods x 10 policies, {style}, p99", m and float(m.group(2)), " ms", f"p50 {m.group(1)} ms; floor (the same HNS calls alone) p50 {m.group(3)} / p99 {m.group(4)} ms; {l}" if m else l, "—", "<", None)

# --- CNI (crates/cni/benches/cni.rs: its Markdown table, ms)
cn = log("cni")
def cni_add(label):
    m = re.search(r"^\| " + re.escape(label) + r"[^|]*\| ([\d.]+) \| ([\d.]+) \|", cn or "", re.M)
    return (float(m.group(1)), float(m.group(2))) if m else (None, None)
win, br, loaded = cni_add("win-bridge + host-local (winnet"), cni_add("bridge + host-local (Debian"), cni_add("win-bridge + host-local with 2000")
l = f"load {load('cni')}"
row("cni", "CNI ADD p50, win-bridge + host-local ÷ Debian bridge", win[0] and br[0] and win[0] / br[0], "", f"bridge {br[0]} ms; {l}" if br[0] else l, "<= 1.0", "<", 1.0)
row("cni", "a pod's endpoint by the CNI with 2,000 Services programmed: ADD p99", loaded[1], " ms", f"p50 {loaded[0]} ms; none programmed p99 {win[1]} ms" if loaded[0] else "—", "—", "<", None)

# --- flannel (crates/flannel/benches/flanneld.rs, figure 3)
fl = log("flannel")
m = re.search(r"one lease appearing.*?p50 ([\d.]+) ms, p99 ([\d.]+) ms; floor.*?p50 ([\d.]+) ms, p99 ([\d.]+) ms", fl or "")
row("flannel", "a flannel lease appearing or going, 100 leases, to its RemoteSubnetRoute: p99", m and float(m.group(2)), " ms", f"p50 {m.group(1)} ms; etcd put->watch p99 {m.group(4)} ms; load {load('flannel')}" if m else "—", "—", "<", None)

# --- cluster DNS
dn, dc = log("dns"), log("dns-change")
m = re.search(r"^\| queries/s[^|]*\| (\d+) \| (\d+) \| ([\d.]+) \|", dn or "", re.M)
l = f"load {load('dns')}"
row("dns", "cluster DNS queries/s, 10,000 Services (dnsperf, 3 s)", m and float(m.group(1)), "", f"Knot DNS {m.group(2)}/s; {l}" if m else l, ">= 50,000", ">", 50000, "{:.0f}")
row("dns", "the same ÷ Knot DNS", m and float(m.group(3)), "", "—", ">= 0.5", ">", 0.5)
m = re.search(r"EndpointSlice rewrite -> changed answer[^|]*\| ([\d.]+) / ([\d.]+) / ([\d.]+) ms", dn or "")
row("dns", "DNS: manifest rewrite to the changed answer, p99", m and float(m.group(2)), " ms", f"p50 {m.group(1)} ms" if m else "—", "< 100 ms", "<", 100)
m = re.search(r"DNS answer after an EndpointSlice change.*?p50 ([\d.]+) ms, p99 ([\d.]+) ms; floor.*?p50 ([\d.]+) ms, p99 ([\d.]+) ms", dc or "")
row("dns", "DNS: EndpointSlice change published to the changed answer, p99", m and float(m.group(2)), " ms", f"p50 {m.group(1)} ms; unchanged answer p99 {m.group(4)} ms; load {load('dns-change')}" if m else "—", "< 100 ms", "<", 100, floor_value=m and float(m.group(4)))

print(f"winnet performance budgets (DESIGN §6), quick run: benches built in {built} s, run in {ran} s; load now {open('/proc/loadavg').read().split()[:3]}")
print()
print("| measure | figure | same-run baseline or floor | budget | met / missed |")
print("|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
for name in ("switch", "proxy", "policy", "dns-change", "dns", "cni", "flannel", "dataplane"):
    if os.path.exists(os.path.join(work, name + ".rc")) and not ran_ok(name):
        broken = True
        print(f"\n{name} failed; the end of its output:\n" + "\n".join((log(name) or "").splitlines()[-15:]))
sys.exit(1 if failed else 2 if broken else 0)
PY
