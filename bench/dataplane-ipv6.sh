#!/usr/bin/env bash
# TCP throughput pod -> pod through winnet's switch (TAP vNICs, hnsd in a node namespace)
# against a veth pair + Linux bridge, over IPv4 and over IPv6 (dual-stack pods on a dual-stack
# L2Bridge network, neighbour discovery answered by the switch), and connections/s to a
# ClusterIP against the pod's own address, all in the same run. Root; needs iperf3 (Debian).
# Usage: bench/dataplane-ipv6.sh [SECONDS]. (bench/dataplane.sh compares the kernel, Open
# vSwitch and winnet; this one keeps the dual-stack IPv4/IPv6 pair of issue 15.)
# Prints a Markdown table; everything it makes is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
[ "$(id -u)" = 0 ] || { echo "run as root: the bench makes network namespaces" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 is missing: apt-get install iperf3" >&2; exit 1; }

cargo build --release --quiet -p winnet --bin winnet --example connrate
winnet="$PWD/target/release/winnet"
connrate="$PWD/target/release/examples/connrate"

t="wb$$"
work="$(mktemp -d)"
pids=()
cleanup() {
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

iperf() { # ns-client ns-server ip -> Gbit/s
    nsx "$2" iperf3 -s -1 -D -p 5201 >/dev/null
    sleep 0.3
    nsx "$1" iperf3 -c "$3" -p 5201 -t "$secs" -J \
        | python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))' 2>/dev/null \
        || nsx "$1" iperf3 -c "$3" -p 5201 -t "$secs" -f g | awk '/receiver/ {print $(NF-2)}'
}

# --- the kernel path: veth pairs on a Linux bridge
ip netns add "$t-kbr"; ip netns add "$t-ka"; ip netns add "$t-kb"
nodad() { # ns: no duplicate address detection (the addresses here are unique by construction)
    nsx "$1" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
}
nodad "$t-ka"; nodad "$t-kb"
ip -n "$t-kbr" link add br0 type bridge; ip -n "$t-kbr" link set br0 up
for p in ka kb; do
    ip -n "$t-kbr" link add "$p" type veth peer name eth0 netns "$t-$p"
    ip -n "$t-kbr" link set "$p" master br0 up
    ip -n "$t-$p" link set lo up; ip -n "$t-$p" link set eth0 up
done
ip -n "$t-ka" addr add 10.55.0.1/24 dev eth0; ip -n "$t-kb" addr add 10.55.0.2/24 dev eth0
ip -n "$t-ka" addr add fd00:55::1/64 dev eth0 nodad; ip -n "$t-kb" addr add fd00:55::2/64 dev eth0 nodad

# --- winnet: a node namespace with hnsd, an L2Bridge network, two pods
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
net=$("$winnet" hns create networks -o id -f - <<JSON
{"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.244.1.0/24",
 "Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]},{"IpAddressPrefix":"fd00:10:244:1::/64",
 "Routes":[{"NextHop":"fd00:10:244:1::1","DestinationPrefix":"::/0"}]}]}],
 "Policies":[{"Type":"NetAdapterName","Settings":{"NetworkAdapterName":"eth0"}}]}
JSON
)
# flannel's bridge endpoint: the pods' gateway .2 (and ::2, as a dual-stack node's operator
# makes it), attached to the host.
hep=$("$winnet" hns create endpoints -o id -f - <<JSON
{"Name":"cbr0_ep","HostComputeNetwork":"$net","IpConfigurations":[{"IpAddress":"10.244.1.2","PrefixLength":24},
 {"IpAddress":"fd00:10:244:1::2","PrefixLength":64}]}
JSON
)
hns_host=$("$winnet" hns create namespaces -o id -f - <<JSON
{"Type":"Host"}
JSON
)
"$winnet" hns modify namespaces "$hns_host" -f - >/dev/null <<JSON
{"ResourceType":"Endpoint","RequestType":"Add","Settings":{"EndpointId":"$hep"}}
JSON
pod() { # name ip ip6 -> endpoint id (a dual-stack pod, as sdnbridge with enableDualStack makes it)
    ip netns add "$t-$1"; ip -n "$t-$1" link set lo up; nodad "$t-$1"
    local ep ns
    ep=$("$winnet" hns create endpoints -o id -f - <<JSON
{"Name":"$1_cbr0","HostComputeNetwork":"$net","IpConfigurations":[{"IpAddress":"$2","PrefixLength":24},
 {"IpAddress":"$3","PrefixLength":64}],
 "Routes":[{"NextHop":"10.244.1.2","DestinationPrefix":"0.0.0.0/0"},{"NextHop":"fd00:10:244:1::2","DestinationPrefix":"::/0"}]}
JSON
)
    ns=$("$winnet" hns create namespaces -o id -f - <<JSON
{"LinuxNetns":"/run/netns/$t-$1"}
JSON
)
    "$winnet" hns modify namespaces "$ns" -f - >/dev/null <<JSON
{"ResourceType":"Endpoint","RequestType":"Add","Settings":{"EndpointId":"$ep"}}
JSON
    echo "$ep"
}
epa=$(pod pa 10.244.1.10 fd00:10:244:1::a)
epb=$(pod pb 10.244.1.11 fd00:10:244:1::b)
"$winnet" hns create loadbalancers -o id -f - >/dev/null <<JSON
{"HostComputeEndpoints":["$epb"],"FrontendVIPs":["10.96.0.10"],
 "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80}]}
JSON

kernel=$(iperf "$t-ka" "$t-kb" 10.55.0.2)
ours=$(iperf "$t-pa" "$t-pb" 10.244.1.11)
kernel6=$(iperf "$t-ka" "$t-kb" fd00:55::2)
ours6=$(iperf "$t-pa" "$t-pb" fd00:10:244:1::b)

nsx "$t-pb" "$connrate" serve 8080 & pids+=($!)
nsx "$t-kb" "$connrate" serve 8080 & pids+=($!)
sleep 0.3
cps_kernel=$(nsx "$t-ka" "$connrate" 10.55.0.2:8080 "$secs" 4)
cps_pod=$(nsx "$t-pa" "$connrate" 10.244.1.11:8080 "$secs" 4)
cps_vip=$(nsx "$t-pa" "$connrate" 10.96.0.10:80 "$secs" 4)

ratio=$(awk -v a="$ours" -v b="$kernel" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
echo
echo "| what ($secs s each, same run) | winnet | veth + Linux bridge | ratio |"
echo "|---|---:|---:|---:|"
echo "| TCP pod -> pod, one iperf3 stream | $ours Gbit/s | $kernel Gbit/s | $ratio |"
echo "| TCP pod -> pod over IPv6, one iperf3 stream | $ours6 Gbit/s | $kernel6 Gbit/s | $(awk -v a="$ours6" -v b="$kernel6" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }') |"
echo "| connections/s pod -> pod address | ${cps_pod%% *} | ${cps_kernel%% *} | $(awk -v a="${cps_pod%% *}" -v b="${cps_kernel%% *}" 'BEGIN { printf "%.2f", a / b }') |"
echo "| connections/s pod -> ClusterIP (LB to the same pod) | ${cps_vip%% *} | — | $(awk -v a="${cps_vip%% *}" -v b="${cps_pod%% *}" 'BEGIN { printf "%.2f of pod address", a / b }') |"
echo
echo "connrate: kernel: $cps_kernel; pod: $cps_pod; ClusterIP: $cps_vip"
