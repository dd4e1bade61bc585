//! The HNS -> VFP compiler on one node of a large cluster: 2,000 ClusterIP load balancers x 5
//! backends (one local pod in every third, the rest over 5,000 remote endpoints, as in
//! kubernetes#109124), Overlay with a RemoteSubnetRoute per other node (20 nodes, 250 pods
//! each). `HNS_BENCH_UNCOVERED=1` puts the remote endpoints outside the remote subnets, so
//! that each needs its own encapsulation rule on every port.
//!
//! Measures a full compile from scratch (`Compiler::build`) against a same-run baseline that
//! installs the very same rules into a fresh switch with no compiling (the floor: vfp's own
//! programming cost), and the latency of one backend change (`Compiler::apply` of the
//! committed change, and plan + apply + compile together as hnsd's committer runs it).
//!
//! `cargo bench -p hns-compiler --bench compile`. Sizes: `HNS_BENCH_LBS` (2000), `HNS_BENCH_REMOTE`
//! (5000), `HNS_BENCH_PODS` (15), `HNS_BENCH_CHANGES` (500).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use hcn::policy::{
    IsolationIdSetting, ProviderAddressPolicySetting, RemoteSubnetRoutePolicySetting,
};
use hcn::{
    Endpoint, EndpointFlags, EndpointPolicy, Guid, IpConfig, Ipam, LoadBalancer,
    LoadBalancerPortMapping, MacAddress, Network, NetworkPolicy, NetworkType, Route, Subnet,
    SubnetPolicy,
};
use hns::Profile;
use hns::state::{Kind, Object, State, WriteOp};
use hns_compiler::{Compiler, NodeFacts, Resolver};
use vfp::wire::MacAddr;
use vfp::{PortConfig, Rule, Switch, SwitchConfig};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn node_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 168, 1, 11 + i as u8))
}

fn write(state: &mut State, op: WriteOp) -> Object {
    let plan = state.plan(op).expect("write accepted");
    state.apply(&plan.changes);
    plan.result.expect("an object")
}

struct Cluster {
    state: State,
    lbs: Vec<Guid>,
    remote: Vec<Guid>,
    facts: NodeFacts,
}

fn cluster(profile: Profile, lbs: usize, remote: usize, pods: usize) -> Cluster {
    let mut state = State::new(profile);
    let nodes = 20;
    let uncovered = env("HNS_BENCH_UNCOVERED", 0) != 0;
    let mut policies: Vec<NetworkPolicy> = (1..=nodes)
        .map(|j| {
            NetworkPolicy::RemoteSubnetRoute(RemoteSubnetRoutePolicySetting {
                destination_prefix: format!("10.244.{}.0/24", j + 1).parse().unwrap(),
                isolation_id: 4096,
                provider_address: node_ip(j),
                distributed_router_mac_address: MacAddress([0, 0x15, 0x5d, 0xdd, 0, j as u8 + 1]),
            })
        })
        .collect();
    policies.push(NetworkPolicy::ProviderAddress(
        ProviderAddressPolicySetting {
            provider_address: node_ip(0),
        },
    ));
    let net = Network {
        name: "flannel.4096".into(),
        network_type: NetworkType::Overlay,
        ipams: vec![Ipam {
            ipam_type: None,
            subnets: vec![Subnet {
                ip_address_prefix: Some("10.244.1.0/24".parse().unwrap()),
                policies: vec![SubnetPolicy::Vsid(IsolationIdSetting {
                    isolation_id: 4096,
                })],
                routes: vec![Route {
                    next_hop: Some("10.244.1.1".parse().unwrap()),
                    destination_prefix: Some("0.0.0.0/0".parse().unwrap()),
                    metric: 0,
                }],
                flags: 0,
            }],
        }],
        policies,
        ..Network::default()
    };
    let net = write(&mut state, WriteOp::Create(Object::Network(net))).id();
    let local: Vec<Guid> = (0..pods)
        .map(|i| {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 244, 1, 10 + i as u8));
            let ep = Endpoint {
                host_compute_network: net,
                ip_configurations: vec![IpConfig {
                    ip_address: Some(ip),
                    prefix_length: 24,
                }],
                policies: vec![EndpointPolicy::ProviderAddress(
                    ProviderAddressPolicySetting {
                        provider_address: node_ip(0),
                    },
                )],
                ..Endpoint::default()
            };
            write(&mut state, WriteOp::Create(Object::Endpoint(ep))).id()
        })
        .collect();
    let remote: Vec<Guid> = (0..remote)
        .map(|i| {
            let node = 1 + i % nodes;
            let host = i / nodes;
            let ip = if uncovered {
                IpAddr::V4(Ipv4Addr::new(
                    10,
                    100 + node as u8,
                    (host / 250) as u8,
                    (host % 250) as u8 + 2,
                ))
            } else {
                IpAddr::V4(Ipv4Addr::new(
                    10,
                    244,
                    node as u8 + 1,
                    (host % 250) as u8 + 2,
                ))
            };
            let ep = Endpoint {
                host_compute_network: net,
                ip_configurations: vec![IpConfig {
                    ip_address: Some(ip),
                    prefix_length: 0,
                }],
                flags: EndpointFlags::REMOTE_ENDPOINT,
                mac_address: Some(MacAddress([0x02, 0x11, 10, 244, (i >> 8) as u8, i as u8])),
                policies: vec![EndpointPolicy::ProviderAddress(
                    ProviderAddressPolicySetting {
                        provider_address: node_ip(node),
                    },
                )],
                ..Endpoint::default()
            };
            write(&mut state, WriteOp::Create(Object::Endpoint(ep))).id()
        })
        .collect();
    let lbs: Vec<Guid> = (0..lbs)
        .map(|i| {
            let mut backends: Vec<Guid> =
                (0..5).map(|k| remote[(i * 5 + k) % remote.len()]).collect();
            if i % 3 == 0 && !local.is_empty() {
                backends[0] = local[i % local.len()];
            }
            let lb = LoadBalancer {
                host_compute_endpoints: backends,
                source_vip: Some("10.244.1.2".parse().unwrap()),
                frontend_vips: vec![IpAddr::V4(Ipv4Addr::new(
                    10,
                    96,
                    (i / 250) as u8,
                    (i % 250) as u8 + 1,
                ))],
                port_mappings: vec![LoadBalancerPortMapping {
                    protocol: 6,
                    internal_port: 8080,
                    external_port: 80,
                    distribution_type: 0,
                    flags: 0,
                }],
                linux_service: format!("default/svc-{i}:80"),
                ..LoadBalancer::default()
            };
            write(&mut state, WriteOp::Create(Object::LoadBalancer(lb))).id()
        })
        .collect();
    let table: HashMap<IpAddr, MacAddr> = (0..=nodes)
        .map(|j| (node_ip(j), MacAddr([0, 0x15, 0x5d, 1, 0, 0x11 + j as u8])))
        .chain([(
            "192.168.1.1".parse().unwrap(),
            MacAddr([2, 0, 0x5e, 0, 0, 1]),
        )])
        .collect();
    let facts = NodeFacts {
        name: "node1".into(),
        profile,
        host_mac: MacAddr([0, 0x15, 0x5d, 1, 0, 0x11]),
        addresses: vec!["192.168.1.11/24".parse().unwrap()],
        uplink: Some("Ethernet".into()),
        routes: vec![hns_compiler::HostRoute::new(
            "0.0.0.0/0".parse().unwrap(),
            "192.168.1.1".parse().unwrap(),
        )],
        resolver: Resolver::from_table(table),
        dynamic_ports: Default::default(),
    };
    Cluster {
        state,
        lbs,
        remote,
        facts,
    }
}

/// The rules of a switch as (port config, [(layer, origin, rules)]) to replay.
type Program = Vec<(PortConfig, Vec<(String, vfp::Origin, Vec<Rule>)>)>;

fn program_of(sw: &Switch) -> Program {
    sw.ports()
        .map(|p| {
            let mut sets: Vec<(String, vfp::Origin, Vec<Rule>)> = Vec::new();
            for l in p.layers() {
                for g in l.groups() {
                    let mut by: HashMap<vfp::Owner, (vfp::Origin, Vec<(u32, Rule)>)> =
                        HashMap::new();
                    for r in g.rules() {
                        by.entry(r.origin.owner.clone())
                            .or_insert_with(|| ((*r.origin).clone(), Vec::new()))
                            .1
                            .push((r.index, r.rule.clone()));
                    }
                    for (_, (origin, mut rules)) in by {
                        rules.sort_by_key(|(i, _)| *i);
                        sets.push((
                            l.name().to_string(),
                            origin,
                            rules.into_iter().map(|(_, r)| r).collect(),
                        ));
                    }
                }
            }
            (p.config().clone(), sets)
        })
        .collect()
}

fn replay(p: &Program) -> Switch {
    let mut sw = Switch::new(SwitchConfig::default());
    for (config, sets) in p {
        let id = sw.add_port(config.clone()).expect("port");
        for (layer, origin, rules) in sets {
            sw.layer_mut(id, layer)
                .expect("layer")
                .set_rules(origin.clone(), rules.clone());
        }
    }
    sw
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).saturating_sub(1);
    v.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let n_lbs = env("HNS_BENCH_LBS", 2000);
    let n_remote = env("HNS_BENCH_REMOTE", 5000);
    let n_pods = env("HNS_BENCH_PODS", 15);
    let n_changes = env("HNS_BENCH_CHANGES", 500);
    let t = Instant::now();
    // unrestricted: the one profile whose HNS (16.0) has HcnModifyLoadBalancer, which hnslib
    // gates at 15.5 (ws2025 is 15.4), so that a backend change is one write.
    let c = cluster(Profile::Unrestricted, n_lbs, n_remote, n_pods);
    println!(
        "state: {n_lbs} LBs x 5 backends, {n_remote} remote endpoints ({}), {n_pods} pods (built in {:.2} s)",
        if env("HNS_BENCH_UNCOVERED", 0) != 0 {
            "outside the remote subnets"
        } else {
            "in the remote nodes' subnets"
        },
        t.elapsed().as_secs_f64()
    );

    // Full compile from scratch, against replaying the same rules straight into vfp.
    let mut full = Vec::new();
    let mut base = Vec::new();
    let mut rules = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let compiled = Compiler::build(&c.state, c.facts.clone());
        full.push(t.elapsed());
        rules = compiled.rule_count();
        let program = program_of(compiled.switch());
        let t = Instant::now();
        let sw = replay(&program);
        base.push(t.elapsed());
        assert_eq!(
            sw.ports()
                .flat_map(|p| p.layers())
                .map(vfp::Layer::rule_count)
                .sum::<usize>(),
            rules
        );
    }
    let (f50, b50) = (pct(&mut full, 0.5), pct(&mut base, 0.5));
    println!(
        "full compile: {rules} rules; median {} (runs {}); baseline (same rules straight into vfp) median {}; ratio {:.2}",
        ms(f50),
        full.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", "),
        ms(b50),
        f50.as_secs_f64() / b50.as_secs_f64()
    );

    // One backend change: HcnModifyLoadBalancer (unrestricted), one committed batch.
    let mut state = c.state;
    let mut compiler = Compiler::build(&state, c.facts.clone());
    let mut compile_only = Vec::new();
    let mut whole = Vec::new();
    for k in 0..n_changes {
        let id = c.lbs[(k * 7919) % c.lbs.len()];
        let Some(mut lb) = state.load_balancer(id).cloned() else {
            continue;
        };
        lb.host_compute_endpoints[4] = c.remote[(k * 104_729) % c.remote.len()];
        lb.host_compute_endpoints.dedup();
        let t0 = Instant::now();
        let plan = state
            .plan(WriteOp::UpdateLoadBalancer(id, lb))
            .expect("update");
        state.apply(&plan.changes);
        let t1 = Instant::now();
        compiler.apply(&state, &plan.changes);
        let t2 = Instant::now();
        compile_only.push(t2 - t1);
        whole.push(t2 - t0);
    }
    println!(
        "one backend change (modify, unrestricted) x{}: compile p50 {} p99 {}; plan+apply+compile p50 {} p99 {}",
        compile_only.len(),
        ms(pct(&mut compile_only, 0.5)),
        ms(pct(&mut compile_only, 0.99)),
        ms(pct(&mut whole, 0.5)),
        ms(pct(&mut whole, 0.99)),
    );

    // The same change as kube-proxy makes it on ws2022: delete, then create (two batches).
    let mut pair = Vec::new();
    for k in 0..n_changes {
        let id = c.lbs[(k * 7919) % c.lbs.len()];
        let Some(mut lb) = state.load_balancer(id).cloned() else {
            continue;
        };
        lb.host_compute_endpoints[4] = c.remote[(k * 15_485_863) % c.remote.len()];
        lb.host_compute_endpoints.dedup();
        let t0 = Instant::now();
        let del = state
            .plan(WriteOp::Delete(Kind::LoadBalancer, id))
            .expect("delete");
        state.apply(&del.changes);
        compiler.apply(&state, &del.changes);
        let create = state
            .plan(WriteOp::Create(Object::LoadBalancer(lb)))
            .expect("create");
        state.apply(&create.changes);
        compiler.apply(&state, &create.changes);
        pair.push(t0.elapsed());
    }
    println!(
        "one backend change (delete + create) x{}: plan+apply+compile p50 {} p99 {}",
        pair.len(),
        ms(pct(&mut pair, 0.5)),
        ms(pct(&mut pair, 0.99)),
    );
}
