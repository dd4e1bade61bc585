#!/usr/bin/env bash
# Pod -> pod through three switches in one run, on the same two pod namespaces and addresses
# (10.244.1.10 -> 10.244.1.11): the kernel (veth pairs on a Linux bridge), Open vSwitch's
# userspace datapath (datapath_type=netdev, TAP ports with userspace TSO, its own ovsdb-server and
# ovs-vswitchd under a temporary directory) and winnet (hnsd in a node namespace, TAP vNICs, every
# frame through the VFP switch in user space). For each: one TCP stream, 4 TCP streams, UDP
# 64-byte frames/s, connections/s and UDP round trip p50/p99, each as a ratio to the kernel; and
# winnet's connections/s to a ClusterIP against the pod's own address.
# Root; needs iperf3 and sockperf (installed from Debian if missing, with openvswitch-switch).
# Usage: bench/dataplane.sh [SECONDS]   (PEERS="kernel ovs winnet" picks the switches; ROUNDS=N
# measures them in turn N times and reports medians; WINNET=path runs another winnet binary)
# Prints a Markdown table; everything it makes is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
peers="${PEERS:-kernel ovs winnet}"
[ "$(id -u)" = 0 ] || { echo "run as root: the bench makes network namespaces" >&2; exit 1; }
need=()
command -v iperf3 >/dev/null || need+=(iperf3)
command -v sockperf >/dev/null || need+=(sockperf)
case " $peers " in *" ovs "*) command -v ovs-vswitchd >/dev/null || need+=(openvswitch-switch) ;; esac
if [ "${#need[@]}" -gt 0 ]; then
    echo "installing ${need[*]} (Debian)" >&2
    # policy-rc.d keeps Debian's own Open vSwitch service from starting: the bench runs its own.
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi

cargo build --release --quiet -p winnet --bin winnet --example connrate
# WINNET=path measures another build of winnet (e.g. one from an earlier commit) in its place.
winnet="${WINNET:-$PWD/target/release/winnet}"
connrate="$PWD/target/release/examples/connrate"

t="wb$$"
work="$(mktemp -d)"
pids=()
cleanup() {
    ovs_down || true
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    # `nsx ... &` forks a subshell, so the pids above are not the servers themselves: kill
    # whatever still runs in the namespaces before deleting them.
    for ns in $(ip netns list | awk '{print $1}' | grep "^$t-" || true); do
        ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns"
    done
    rm -rf "$work"
}
trap cleanup EXIT
nsx() { ip netns exec "$@"; }
# Waits (up to 10 s) until something in namespace $1 listens on port $3 of protocol $2 (t|u).
listening() {
    for _ in $(seq 200); do
        nsx "$1" ss -Hln"$2" "sport = :$3" | grep -q . && return 0
        sleep 0.05
    done
    echo "nothing listens on $2 port $3 in $1" >&2
    return 1
}
# Waits (up to 10 s) until pod a reaches pod b (the switch has learnt or been told both).
reachable() {
    for _ in $(seq 100); do
        nsx "$t-pa" ping -c 1 -W 0.1 10.244.1.11 >/dev/null 2>&1 && return 0
    done
    echo "$1: pod a does not reach pod b" >&2
    return 1
}

# --- the two pods every switch connects: namespaces and addresses stay, only eth0 changes.
for p in pa pb; do ip netns add "$t-$p"; ip -n "$t-$p" link set lo up; done
pod_addr() { # pod ip: address eth0 and bring it up, with the default route winnet's pods get
    ip -n "$t-$1" addr add "$2/24" dev eth0
    ip -n "$t-$1" link set eth0 up
    ip -n "$t-$1" route add default via 10.244.1.2
}
pod_eth0_gone() { # waits until neither pod has an eth0 any more
    for _ in $(seq 200); do
        ip -n "$t-pa" link show eth0 >/dev/null 2>&1 || ip -n "$t-pb" link show eth0 >/dev/null 2>&1 || return 0
        sleep 0.05
    done
    echo "a pod's eth0 outlived its switch" >&2
    return 1
}

# --- measures, one function each; every one prints one number for pod a -> pod b.
tcp() { # streams -> Gbit/s at the receiver
    nsx "$t-pb" iperf3 -s -1 -D -p 5201 >/dev/null
    listening "$t-pb" t 5201
    nsx "$t-pa" iperf3 -c 10.244.1.11 -p 5201 -t "$secs" -P "$1" -J \
        | python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}
udp_pps() { # -> "received sent": UDP datagrams/s with 18-byte payloads (64-byte Ethernet frames
    # with the FCS), the sender unthrottled; what arrives is what counts (the rest was dropped
    # on the way or at the receiver's socket).
    nsx "$t-pb" iperf3 -s -1 -D -p 5202 >/dev/null
    listening "$t-pb" t 5202
    nsx "$t-pa" iperf3 -c 10.244.1.11 -p 5202 -u -b 0 -l 18 -t "$secs" -J \
        | python3 -c 'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; print("%.0f %.0f" % ((s["packets"]-s["lost_packets"])/s["seconds"], s["packets"]/s["seconds"]))'
}
cps() { # ip:port -> "N connections/s (...)"
    nsx "$t-pa" "$connrate" "$1" "$secs" 4
}
rtt() { # -> "p50 p99" in µs, UDP ping-pong with 64-byte messages, one outstanding
    ip netns exec "$t-pb" sockperf sr -p 11111 >/dev/null 2>&1 &
    local sp=$!
    listening "$t-pb" u 11111
    nsx "$t-pa" sockperf pp -i 10.244.1.11 -p 11111 -m 64 -t "$secs" --full-rtt 2>&1 \
        | awk '/percentile 50.000/ {p50=$NF} /percentile 99.000/ {p99=$NF} END {printf "%.1f %.1f\n", p50, p99}'
    kill "$sp" 2>/dev/null || true
    wait "$sp" 2>/dev/null || true
}
declare -A r all
measure() { # peer: every measure, results in r[peer.measure] (this round's)
    reachable "$1"
    ip netns exec "$t-pb" "$connrate" serve 8080 &
    local srv=$!
    listening "$t-pb" t 8080
    r[$1.tcp1]=$(tcp 1)
    r[$1.tcp4]=$(tcp 4)
    read -r r[$1.udp] r[$1.udpsent] < <(udp_pps)
    local c
    c=$(cps 10.244.1.11:8080)
    r[$1.cps]=${c%% *}
    r[$1.cpsraw]=$c
    read -r r[$1.p50] r[$1.p99] < <(rtt)
    if [ "$1" = winnet ]; then
        c=$(cps 10.96.0.10:80)
        r[$1.vip]=${c%% *}
        r[$1.vipraw]=$c
    fi
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    echo "$1 done: ${r[$1.tcp1]} / ${r[$1.tcp4]} Gbit/s, ${r[$1.udp]} pps, ${r[$1.cps]} conn/s, rtt ${r[$1.p50]} / ${r[$1.p99]} us" >&2
}

# --- the kernel: a veth pair per pod on a Linux bridge in its own namespace
kernel_up() {
    ip netns add "$t-kbr"
    ip -n "$t-kbr" link add br0 type bridge
    ip -n "$t-kbr" link set br0 up
    ip -n "$t-kbr" addr add 10.244.1.2/24 dev br0
    for p in pa pb; do
        ip -n "$t-kbr" link add "$p" type veth peer name eth0 netns "$t-$p"
        ip -n "$t-kbr" link set "$p" master br0 up
    done
    pod_addr pa 10.244.1.10
    pod_addr pb 10.244.1.11
}
kernel_down() {
    ip netns del "$t-kbr"
    pod_eth0_gone
}

# --- Open vSwitch's userspace datapath: a netdev bridge with a TAP port per pod, moved into the
# pod as its eth0. TAP ports with userspace TSO are this datapath's best port type here: in a
# probe on this machine, veth + AF_PACKET ports ("system") carried half the TCP throughput, and
# AF_XDP ports on veth passed pings but not TCP (partial checksums from the veth) while a PMD
# thread spun one of the two cores.
ovsd="$work/ovs"
vs() { ovs-vsctl --db="unix:$ovsd/db.sock" --timeout=10 "$@"; }
ovs_up() {
    mkdir -p "$ovsd"
    # Everything OVS makes (db, sockets, logs, pids) under the bench's temporary directory.
    export OVS_RUNDIR="$ovsd" OVS_LOGDIR="$ovsd" OVS_DBDIR="$ovsd" OVS_SYSCONFDIR="$ovsd"
    ip netns add "$t-ovs"
    ip -n "$t-ovs" link set lo up
    ovsdb-tool create "$ovsd/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    nsx "$t-ovs" ovsdb-server "$ovsd/conf.db" --remote="punix:$ovsd/db.sock" \
        --pidfile="$ovsd/ovsdb-server.pid" --unixctl="$ovsd/ovsdb-server.ctl" \
        --log-file="$ovsd/ovsdb-server.log" -vconsole:off --detach
    vs --no-wait init
    vs --no-wait set Open_vSwitch . other_config:userspace-tso-enable=true
    nsx "$t-ovs" ovs-vswitchd "unix:$ovsd/db.sock" --pidfile="$ovsd/ovs-vswitchd.pid" \
        --unixctl="$ovsd/ovs-vswitchd.ctl" --log-file="$ovsd/ovs-vswitchd.log" -vconsole:off --detach
    vs add-br br0 -- set bridge br0 datapath_type=netdev
    ip -n "$t-ovs" link set br0 up
    ip -n "$t-ovs" addr add 10.244.1.2/24 dev br0
    for p in pa pb; do
        vs add-port br0 "ovs-$p" -- set interface "ovs-$p" type=tap
        ip -n "$t-ovs" link set "ovs-$p" netns "$t-$p"
        ip -n "$t-$p" link set "ovs-$p" name eth0
    done
    pod_addr pa 10.244.1.10
    pod_addr pb 10.244.1.11
}
ovs_down() {
    [ -d "$ovsd" ] || return 0
    for d in ovs-vswitchd ovsdb-server; do
        [ -f "$ovsd/$d.pid" ] || continue
        local p
        p=$(cat "$ovsd/$d.pid")
        kill "$p" 2>/dev/null || true
        for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    done
    ip netns del "$t-ovs" 2>/dev/null || true
    rm -rf "$ovsd"
    # OVS makes its TAPs persistent (they outlive a restart of ovs-vswitchd): delete them.
    for p in pa pb; do ip -n "$t-$p" link del eth0 2>/dev/null || true; done
    pod_eth0_gone
}

# --- winnet: a node namespace with hnsd, an L2Bridge network, the two pods' endpoints
winnet_hnsd() {
    ip netns add "$t-fab"; ip -n "$t-fab" link add br0 type bridge; ip -n "$t-fab" link set br0 up
    ip netns add "$t-node"; ip -n "$t-node" link set lo up
    ip -n "$t-fab" link add node type veth peer name eth0 netns "$t-node"
    ip -n "$t-fab" link set node master br0 up
    ip -n "$t-node" addr add 192.168.78.11/24 dev eth0; ip -n "$t-node" link set eth0 up
    ip -n "$t-node" route add default via 192.168.78.1
    export HNS_SOCKET="$work/hns.sock"
    RUST_LOG=warn "$winnet" hnsd --node-netns "$t-node" --nic eth0 --state-dir "$work/state" --socket "$HNS_SOCKET" 2>"$work/hnsd.log" &
    pids+=($!)
    for _ in $(seq 200); do [ -S "$HNS_SOCKET" ] && break; sleep 0.05; done
    [ -S "$HNS_SOCKET" ] || { cat "$work/hnsd.log" >&2; exit 1; }
}
winnet_up() {
    winnet_hnsd
    local net hep hns_host
    net=$("$winnet" hns create networks -o id -f - <<JSON
{"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.244.1.0/24",
 "Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
 "Policies":[{"Type":"NetAdapterName","Settings":{"NetworkAdapterName":"eth0"}}]}
JSON
)
    # flannel's bridge endpoint: the pods' gateway .2, attached to the host.
    hep=$("$winnet" hns create endpoints -o id -f - <<JSON
{"Name":"cbr0_ep","HostComputeNetwork":"$net","IpConfigurations":[{"IpAddress":"10.244.1.2","PrefixLength":24}]}
JSON
)
    hns_host=$("$winnet" hns create namespaces -o id -f - <<JSON
{"Type":"Host"}
JSON
)
    "$winnet" hns modify namespaces "$hns_host" -f - >/dev/null <<JSON
{"ResourceType":"Endpoint","RequestType":"Add","Settings":{"EndpointId":"$hep"}}
JSON
    winnet_pod pa 10.244.1.10 "$net"
    winnet_pod pb 10.244.1.11 "$net"
    "$winnet" hns create loadbalancers -o id -f - >/dev/null <<JSON
{"HostComputeEndpoints":["${wep[pb]}"],"FrontendVIPs":["10.96.0.10"],
 "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80}]}
JSON
}
declare -A wep wns
winnet_pod() { # name ip network: the pod's endpoint and HCN namespace, in wep/wns
    wep[$1]=$("$winnet" hns create endpoints -o id -f - <<JSON
{"Name":"$1_cbr0","HostComputeNetwork":"$3","IpConfigurations":[{"IpAddress":"$2","PrefixLength":24}],
 "Routes":[{"NextHop":"10.244.1.2","DestinationPrefix":"0.0.0.0/0"}]}
JSON
)
    wns[$1]=$("$winnet" hns create namespaces -o id -f - <<JSON
{"LinuxNetns":"/run/netns/$t-$1"}
JSON
)
}
winnet_attach() { # $1 Add|Remove: hnsd makes the pods' eth0 (TAPs) on the attach, removes them on the detach
    for p in pa pb; do
        "$winnet" hns modify namespaces "${wns[$p]}" -f - >/dev/null <<JSON
{"ResourceType":"Endpoint","RequestType":"$1","Settings":{"EndpointId":"${wep[$p]}"}}
JSON
    done
}

# ROUNDS=N measures the three in turn N times (the same order each round) and reports the
# median of each figure: the machine's load drifts over a run, and rounds spread the drift
# over every peer instead of charging it to whichever was measured when it peaked.
rounds="${ROUNDS:-1}"
measures="tcp1 tcp4 udp udpsent cps p50 p99 vip"
for peer in $peers; do
    case "$peer" in kernel | ovs | winnet) ;; *) echo "unknown peer $peer (kernel, ovs, winnet)" >&2; exit 2 ;; esac
done
case " $peers " in *" winnet "*) winnet_up ;; esac
for round in $(seq "$rounds"); do
    for peer in $peers; do
        case "$peer" in
        kernel) kernel_up; measure kernel; kernel_down ;;
        ovs) ovs_up; measure ovs; ovs_down ;;
        winnet)
            winnet_attach Add; measure winnet
            if [ "$round" -lt "$rounds" ]; then winnet_attach Remove; pod_eth0_gone; fi ;;
        esac
        for m in $measures; do
            [ -n "${r[$peer.$m]:-}" ] && all[$peer.$m]+="${r[$peer.$m]} "
        done
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
for k in "${!all[@]}"; do r[$k]=$(echo "${all[$k]}" | median); done

# --- the table: every figure and its ratio to the kernel's in this run (latency: kernel / peer,
# so that above 1 is better everywhere).
cell() { # peer measure [inverse]
    local v="${r[$1.$2]:-}" k="${r[kernel.$2]:-}"
    [ -n "$v" ] || { printf '—'; return; }
    if [ "$1" = kernel ] || [ -z "$k" ]; then printf '%s' "$v"; return; fi
    awk -v a="$v" -v b="$k" -v inv="${3:-}" 'BEGIN { if (a <= 0 || b <= 0) { printf "%s (n/a)", a; exit }
        printf "%s (%.2f)", a, inv ? b / a : a / b }'
}
row() { # label measure [inverse]
    printf '| %s |' "$1"
    for p in kernel ovs winnet; do printf ' %s |' "$(cell "$p" "$2" "${3:-}")"; done
    echo
}
echo
echo "pod -> pod, $secs s per measure, same run, median of $rounds round(s); in brackets: ratio to the kernel (latency: kernel ÷ peer)"
echo
echo "| what | veth + Linux bridge | Open vSwitch netdev (TAP) | winnet |"
echo "|---|---:|---:|---:|"
row "TCP, one iperf3 stream, Gbit/s" tcp1
row "TCP, 4 iperf3 streams, Gbit/s" tcp4
row "UDP 64-byte frames received/s (iperf3 -u -l 18 -b 0)" udp
row "connections/s (connrate, 4 threads)" cps
row "UDP round trip p50, µs (sockperf ping-pong, 64 B)" p50 inv
row "UDP round trip p99, µs" p99 inv
if [ -n "${r[winnet.vip]:-}" ]; then
    echo
    echo "winnet connections/s to a ClusterIP (LB 10.96.0.10:80 -> pod b:8080): ${r[winnet.vip]}" \
        "($(awk -v a="${r[winnet.vip]}" -v b="${r[winnet.cps]}" 'BEGIN { printf "%.2f", a / b }') of the pod address)"
fi
echo
for p in $peers; do
    echo "$p: UDP sent ${r[$p.udpsent]:-}/s (median); last round's connrate: ${r[$p.cpsraw]:-}${r[$p.vipraw]:+; ClusterIP: ${r[$p.vipraw]}}"
done
echo
echo "every round (in order):"
for p in $peers; do
    for m in $measures; do [ -n "${all[$p.$m]:-}" ] && echo "  $p $m: ${all[$p.$m]}"; done
done
