//! A pod's attachment to an HNS network, shared by every plugin that puts pods on HNS:
//! ADD (IPAM once per pod, endpoint `<sandbox>_<network>`, namespace, attach; undone on failure),
//! DEL (idempotent), CHECK (HNS against `prevResult` and the config), GC and STATUS.
//! What differs between win-bridge, win-overlay and sdn* is a [`Driver`].

use std::collections::BTreeSet;
use std::future::Future;
use std::net::IpAddr;

use hcn::{Endpoint, Guid, Namespace, Network};
use hns_client::{Client, Kind};
use host::netlink::Netlink;
use host::netns::Netns;
use ipnet::IpNet;

use crate::config::NetConf;
use crate::error::{CniError, Code, HnsContext};
use crate::ipam::Ipam;
use crate::netns::NetNs;
use crate::protocol::{Args, Request};
use crate::result::{self, CniResult, IpConfig};
use crate::state::{Lock, Record, Store};

/// What one plugin decides about networks, endpoints and results.
pub(crate) trait Driver {
    /// The config.
    fn conf(&self) -> &NetConf;

    /// The network named by the config, if it exists; a network of the wrong type is code 7.
    async fn find_network(&self, client: &Client) -> Result<Option<Network>, CniError>;

    /// The network ADD puts the pod on. win-* only find it; sdn* create it when absent.
    async fn ensure_network(
        &self,
        _req: &Request<'_>,
        client: &Client,
    ) -> Result<Network, CniError> {
        self.find_network(client)
            .await?
            .ok_or_else(|| missing_network(&self.conf().name, self.conf().plugin_type.as_str()))
    }

    /// The endpoint document for a new endpoint: `ips` are every address IPAM returned, or
    /// those HNS assigned (second pass), or none (HNS will assign them). Which of them the
    /// endpoint gets is the driver's choice (win-*: the first IPv4; sdn*: one per family).
    async fn endpoint(
        &self,
        req: &Request<'_>,
        client: &Client,
        net: &Network,
        name: &str,
        ips: &[IpConfig],
    ) -> Result<Endpoint, CniError>;

    /// The ADD result for `ep`.
    fn result(&self, args: &Args, net: &Network, ep: &Endpoint) -> CniResult;

    /// STATUS: whether ADD could run. win-* need the network to exist; sdn* would create it.
    async fn status(&self, client: &Client) -> Result<(), CniError> {
        match self.find_network(client).await? {
            Some(_) => Ok(()),
            None => Err(CniError::new(
                Code::NOT_AVAILABLE,
                format!(
                    "HNS network \"{}\" does not exist (yet); ADD would fail until it is created (flanneld creates it)",
                    self.conf().name
                ),
            )),
        }
    }
}

/// Code 7: the network named by `name` is not in HNS.
pub(crate) fn missing_network(name: &str, plugin: &str) -> CniError {
    CniError::config(
        "name",
        format!(
            "HNS network \"{name}\" does not exist; {plugin} never creates networks: create it first (flanneld does, or `winnet hns create networks -f FILE`)"
        ),
    )
}

/// Runs an HNS conversation on a runtime of its own (one plugin process, one call).
pub(crate) fn block_on<T>(f: impl Future<Output = Result<T, CniError>>) -> Result<T, CniError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::internal(format!("cannot start the async runtime: {e}")))?
        .block_on(f)
}

/// The endpoint name of a pod on a network: `<sandboxID>_<network>` (`ConstructEndpointName`).
pub fn endpoint_name(sandbox: &str, network: &str) -> String {
    format!("{sandbox}_{network}")
}

fn client(req: &Request<'_>) -> Client {
    req.hns.clone()
}

/// The gateway of `ep`: the next hop of its default route.
pub(crate) fn endpoint_gateway(ep: &Endpoint) -> Option<IpAddr> {
    ep.routes
        .iter()
        .find(|r| r.destination_prefix.is_some_and(|p| p.prefix_len() == 0))
        .or_else(|| ep.routes.first())
        .and_then(|r| r.next_hop)
}

/// The gateway of `ep` for addresses of `address`'s family: the next hop of its default
/// route of that family, else of its first route of that family.
pub(crate) fn endpoint_gateway_for(ep: &Endpoint, address: IpAddr) -> Option<IpAddr> {
    let v4 = address.is_ipv4();
    let same = |r: &&hcn::Route| {
        r.destination_prefix
            .map(|p| p.addr().is_ipv4())
            .or_else(|| r.next_hop.map(|h| h.is_ipv4()))
            == Some(v4)
    };
    let mut routes = ep.routes.iter().filter(same);
    let default = routes
        .clone()
        .find(|r| r.destination_prefix.is_some_and(|p| p.prefix_len() == 0));
    default.or_else(|| routes.next()).and_then(|r| r.next_hop)
}

/// The addresses of `ep`, in its order, each with the prefix length of the network's subnet
/// that holds it (as the upstream result builders do), else the endpoint's own.
pub(crate) fn endpoint_addresses(net: &Network, ep: &Endpoint) -> Vec<IpNet> {
    ep.ip_configurations
        .iter()
        .filter_map(|config| {
            let ip = config.ip_address?;
            let len = net
                .subnet_for(ip)
                .and_then(|s| s.ip_address_prefix)
                .map_or(config.prefix_length, |p| p.prefix_len());
            IpNet::new(ip, len).ok()
        })
        .collect()
}

/// The first address of `ep` (see [`endpoint_addresses`]).
pub(crate) fn endpoint_address(net: &Network, ep: &Endpoint) -> Option<IpNet> {
    endpoint_addresses(net, ep).into_iter().next()
}

/// The addresses of `ep` as IPAM-style configs, each with its family's gateway.
fn assigned_addresses(net: &Network, ep: &Endpoint) -> Vec<IpConfig> {
    endpoint_addresses(net, ep)
        .into_iter()
        .map(|address| IpConfig {
            interface: None,
            address,
            gateway: endpoint_gateway_for(ep, address.addr()),
        })
        .collect()
}

/// The DNS of `ep` in result form.
pub(crate) fn endpoint_dns(ep: &Endpoint) -> result::Dns {
    result::Dns {
        nameservers: ep.dns.server_list.clone(),
        domain: ep.dns.domain.clone(),
        search: ep.dns.search.clone(),
        options: ep.dns.options.clone(),
    }
}

/// The MAC of `ep` as HNS writes it (`00-15-5D-..`).
pub(crate) fn endpoint_mac(ep: &Endpoint) -> String {
    ep.mac_address.map(|m| m.to_string()).unwrap_or_default()
}

/// The MAC of `ep` as Linux writes it (`00:15:5d:..`), for the pod's interface.
fn linux_mac(ep: &Endpoint) -> String {
    ep.mac_address
        .map(|m| {
            let b = m.0;
            format!(
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[0], b[1], b[2], b[3], b[4], b[5]
            )
        })
        .unwrap_or_default()
}

/// The ADD result of `d` for `ep`. A pod in a Linux namespace (CNI_NETNS a path, or
/// `container:<id>` of a pod that has one) also gets its interface (CNI_IFNAME, which hnsd
/// makes in that namespace) reported with the namespace as sandbox, so Linux runtimes
/// (podman, containerd) know which interface holds the address.
async fn add_result<D: Driver>(
    d: &D,
    req: &Request<'_>,
    client: &Client,
    netns: &NetNs,
    net: &Network,
    ep: &Endpoint,
) -> Result<CniResult, CniError> {
    let result = d.result(req.args, net, ep);
    let sandbox = match netns {
        NetNs::Path(p) => p.to_string_lossy().into_owned(),
        NetNs::Container(_) if !ep.host_compute_namespace.is_nil() => {
            client
                .get_namespace_by_id(ep.host_compute_namespace)
                .await
                .hns("read the pod's namespace")?
                .linux_netns
        }
        _ => String::new(),
    };
    if sandbox.is_empty() {
        return Ok(result);
    }
    check_vnic(&sandbox, ep)?;
    Ok(result.with_pod_interface(&req.args.ifname, &linux_mac(ep), &sandbox))
}

/// A pod is built only when its vNIC is: hnsd makes it before the attach returns, so the
/// interface must now be in the pod's namespace, with the endpoint's MAC (not another
/// plugin's interface of that name), and up. hnsd only logs a device it could not make.
fn check_vnic(netns: &str, ep: &Endpoint) -> Result<(), CniError> {
    let ifname = if ep.linux_interface_name.is_empty() {
        "eth0"
    } else {
        ep.linux_interface_name.as_str()
    };
    let link = Netns::from_path(netns)
        .run(|| Netlink::open()?.link(ifname))
        .map_err(|e| {
            CniError::new(
                Code::IO_FAILURE,
                format!("cannot look for the pod's vNIC {ifname} in {netns}: {e}"),
            )
        })?;
    let want = ep.mac_address.map(|m| m.0);
    let problem = match link {
        None => "does not exist".to_string(),
        Some(l) if want.is_some() && l.mac != want => format!(
            "is not the endpoint's vNIC: its MAC is {}, endpoint {}'s is {}",
            l.mac
                .map_or("(none)".into(), |m| hcn::MacAddress(m).to_string()),
            ep.name,
            endpoint_mac(ep)
        ),
        Some(l) if !l.up => "is down".to_string(),
        Some(_) => return Ok(()),
    };
    Err(CniError::new(
        Code::VNIC_NOT_READY,
        format!("the pod's vNIC {ifname} in {netns} {problem}; the pod has no network"),
    )
    .details("hnsd makes the vNIC when the endpoint is attached and logs why it could not; an hnsd without a data plane (no --node-netns) makes none"))
}

/// The HCN namespace of a netns path (our `LinuxNetns` extension), if one exists.
async fn namespace_of_path(client: &Client, path: &str) -> Result<Option<Namespace>, CniError> {
    let filter = serde_json::json!({ "LinuxNetns": path });
    let found = client
        .list_raw(Kind::Namespace, Some(&filter))
        .await
        .hns("look up the namespace of CNI_NETNS")?;
    found
        .into_iter()
        // hnsd matches the filter; the exact comparison guards against case folding of paths.
        .filter_map(|v| serde_json::from_value::<Namespace>(v).ok())
        .find(|n| n.linux_netns == path)
        .map_or(Ok(None), |n| Ok(Some(n)))
}

/// The existing HCN namespace `CNI_NETNS` names: by path or GUID. A GUID that hnsd does not
/// know is code 8.
async fn find_namespace(client: &Client, netns: &NetNs) -> Result<Option<Namespace>, CniError> {
    match netns {
        NetNs::Path(p) => namespace_of_path(client, &p.to_string_lossy()).await,
        NetNs::Guid(id) => match client.get_namespace_by_id(*id).await {
            Ok(ns) => Ok(Some(ns)),
            Err(e) if e.is_not_found() => Err(CniError::new(
                Code::INVALID_NETNS,
                format!(
                    "CNI_NETNS: HCN namespace {id} does not exist in hnsd; create it first (containerd does) or pass the netns path"
                ),
            )),
            Err(e) => Err(CniError::from(e).context("look up the namespace of CNI_NETNS")),
        },
        NetNs::Empty | NetNs::None | NetNs::Container(_) => Ok(None),
    }
}

/// The pod a call is for. `container:<id>` names it; otherwise a namespace that already holds
/// an endpoint of this network belongs to that endpoint's pod (a second container of the pod);
/// otherwise the container is its own sandbox.
async fn pod_sandbox(
    client: &Client,
    netns: &NetNs,
    ns: Option<&Namespace>,
    net: &Network,
    container_id: &str,
) -> Result<String, CniError> {
    if let NetNs::Container(s) = netns {
        return Ok(s.clone());
    }
    let suffix = format!("_{}", net.name);
    for id in ns.into_iter().flat_map(Namespace::endpoint_ids) {
        let ep = match client.get_endpoint_by_id(id).await {
            Ok(ep) => ep,
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                return Err(CniError::from(e).context("read the endpoints of the pod's namespace"));
            }
        };
        if ep.host_compute_network != net.id {
            continue;
        }
        if let Some(s) = ep.name.strip_suffix(&suffix) {
            return Ok(s.to_string());
        }
    }
    Ok(container_id.to_string())
}

/// The endpoint called `name`, if it is on `net`. One of that name on another network is left
/// over from an earlier network of the same name ("corrupted" upstream) and is removed.
async fn existing_endpoint(
    client: &Client,
    name: &str,
    net: &Network,
) -> Result<Option<Endpoint>, CniError> {
    let Some(ep) = client
        .get_endpoint_by_name(name)
        .await
        .hns("look up the pod's endpoint")?
    else {
        return Ok(None);
    };
    if ep.host_compute_network == net.id {
        return Ok(Some(ep));
    }
    remove_endpoint(client, &ep, None).await?;
    Ok(None)
}

/// Detaches `ep` from its namespace, deletes it, and deletes `created_ns` when it is left
/// empty. Things already gone are fine.
async fn remove_endpoint(
    client: &Client,
    ep: &Endpoint,
    created_ns: Option<Guid>,
) -> Result<(), CniError> {
    if !ep.host_compute_namespace.is_nil() {
        match client
            .remove_namespace_endpoint(ep.host_compute_namespace, ep.id)
            .await
        {
            Ok(_) => {}
            Err(e)
                if e.is_not_found()
                    || e.code() == Some(hcn::HResult::HCN_E_ENDPOINT_NOT_ATTACHED) => {}
            Err(e) => {
                return Err(CniError::from(e).context("detach the endpoint from its namespace"));
            }
        }
    }
    match client.delete_endpoint(ep.id).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(CniError::from(e).context(&format!("delete endpoint {}", ep.name))),
    }
    if let Some(ns) = created_ns {
        delete_namespace_if_empty(client, ns).await?;
    }
    Ok(())
}

async fn delete_namespace_if_empty(client: &Client, id: Guid) -> Result<(), CniError> {
    let ns = match client.get_namespace_by_id(id).await {
        Ok(ns) => ns,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(CniError::from(e).context("read the pod's namespace")),
    };
    if ns.endpoint_ids().next().is_some() {
        return Ok(());
    }
    match client.delete_namespace(id).await {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(CniError::from(e).context("delete the pod's namespace")),
    }
}

/// The namespace to attach to for `netns`: the one `find_namespace` found, or (for a path) a new
/// one. The bool says whether it was created now.
async fn ensure_namespace(
    client: &Client,
    netns: &NetNs,
    found: Option<Namespace>,
) -> Result<Option<(Namespace, bool)>, CniError> {
    if let Some(ns) = found {
        return Ok(Some((ns, false)));
    }
    let NetNs::Path(p) = netns else {
        return Ok(None);
    };
    let doc = Namespace {
        linux_netns: p.to_string_lossy().into_owned(),
        ..Namespace::default()
    };
    let ns = client
        .create_namespace(&doc)
        .await
        .hns("create the namespace of CNI_NETNS")?;
    Ok(Some((ns, true)))
}

/// Attaches `ep` to `ns` unless it already is; attached elsewhere is code 8.
async fn attach(client: &Client, ns: &Namespace, ep: &Endpoint) -> Result<(), CniError> {
    if ep.host_compute_namespace == ns.id {
        return Ok(());
    }
    if !ep.host_compute_namespace.is_nil() {
        return Err(CniError::new(
            Code::INVALID_NETNS,
            format!(
                "CNI_NETNS: endpoint {} is attached to namespace {}, not to namespace {} of CNI_NETNS; DEL the container before adding it again",
                ep.name, ep.host_compute_namespace, ns.id
            ),
        ));
    }
    client
        .add_namespace_endpoint(ns.id, ep.id)
        .await
        .hns("attach the endpoint to the pod's namespace")
        .map(drop)
}

/// ADD. A failed ADD leaves nothing behind: what it made is undone, and its record goes.
pub(crate) async fn add<D: Driver>(d: &D, req: &Request<'_>) -> Result<CniResult, CniError> {
    let client = client(req);
    let netns = NetNs::parse(&req.args.netns)?;
    netns.check_for_add()?;
    let net = d.ensure_network(req, &client).await?;
    let found = find_namespace(&client, &netns).await?;
    let sandbox = pod_sandbox(
        &client,
        &netns,
        found.as_ref(),
        &net,
        &req.args.container_id,
    )
    .await?;
    let store = Store::open(&req.conf.state_dir(req.env), &req.conf.name)?;
    let mut lock = store.lock(&sandbox)?;
    let pod = Pod {
        name: endpoint_name(&sandbox, &net.name),
        netns: &netns,
        net: &net,
        sandbox: &sandbox,
    };
    match add_locked(d, req, &client, &pod, found, &mut lock).await {
        Ok(result) => Ok(result),
        Err(e) => {
            let _ = lock.abandon();
            Err(e)
        }
    }
}

/// The pod an ADD is for.
struct Pod<'a> {
    /// Its endpoint's name.
    name: String,
    netns: &'a NetNs,
    net: &'a Network,
    sandbox: &'a str,
}

/// ADD under the pod's lock.
async fn add_locked<D: Driver>(
    d: &D,
    req: &Request<'_>,
    client: &Client,
    pod: &Pod<'_>,
    found: Option<Namespace>,
    lock: &mut Lock,
) -> Result<CniResult, CniError> {
    if let Some(ep) = existing_endpoint(client, &pod.name, pod.net).await? {
        return join(d, req, client, pod, found, ep).await;
    }
    if let NetNs::Container(s) = pod.netns {
        return Err(CniError::new(
            Code::UNKNOWN_CONTAINER,
            format!(
                "CNI_NETNS: container:{s} has no endpoint {} on network \"{}\"; ADD the pod's sandbox container first",
                pod.name, pod.net.name
            ),
        ));
    }

    // A new pod: its namespace first, so that the record (written once, durably, before IPAM
    // takes anything) already says whether DEL and GC must remove the namespace.
    let mut made = Made::default();
    let target = ensure_namespace(client, pod.netns, found).await?;
    if let Some((ns, true)) = &target {
        made.namespace_created = Some(ns.id);
    }
    let record = Record {
        container_id: pod.sandbox.to_string(),
        ifname: req.args.ifname.clone(),
        namespace_created: made.namespace_created,
    };
    if let Err(e) = lock.write(&record) {
        undo(client, &made).await;
        return Err(e);
    }
    let ipam = Ipam::of(req.env, req.args, &req.conf);
    let allocated = match &ipam {
        Some(ipam) => match ipam.add(pod.sandbox, &req.args.ifname) {
            Ok(r) => Some(r),
            Err(e) => {
                // host-local may hold a half-made allocation; DEL is always safe.
                let _ = ipam.del(pod.sandbox, &req.args.ifname);
                undo(client, &made).await;
                return Err(e);
            }
        },
        None => None,
    };
    let ips = allocated.map(|r| r.ips).unwrap_or_default();
    let ns = target.map(|(ns, _)| ns);
    let created = match create(d, req, client, pod, ns.as_ref(), &ips, &mut made).await {
        Ok(ep) => add_result(d, req, client, pod.netns, pod.net, &ep).await,
        Err(e) => Err(e),
    };
    if created.is_err() {
        undo(client, &made).await;
        if let Some(ipam) = &ipam {
            let _ = ipam.del(pod.sandbox, &req.args.ifname);
        }
    }
    created
}

/// The pod's endpoint exists: a second container of the pod (or a repeated ADD) joins it. No
/// IPAM: the pod has its address. A namespace made for it goes again if the join fails.
async fn join<D: Driver>(
    d: &D,
    req: &Request<'_>,
    client: &Client,
    pod: &Pod<'_>,
    found: Option<Namespace>,
    ep: Endpoint,
) -> Result<CniResult, CniError> {
    let target = ensure_namespace(client, pod.netns, found).await?;
    let joined = async {
        if let Some((ns, _)) = &target {
            attach(client, ns, &ep).await?;
        }
        let ep = client
            .get_endpoint_by_id(ep.id)
            .await
            .hns("read the pod's endpoint")?;
        add_result(d, req, client, pod.netns, pod.net, &ep).await
    }
    .await;
    if joined.is_err()
        && let Some((ns, true)) = &target
    {
        let _ = delete_namespace_if_empty(client, ns.id).await;
    }
    joined
}

/// What a failing ADD has made so far, to undo it.
#[derive(Default)]
struct Made {
    endpoint: Option<Endpoint>,
    namespace_created: Option<Guid>,
}

async fn undo(client: &Client, made: &Made) {
    if let Some(ep) = &made.endpoint {
        // Re-read: the endpoint may have been attached before the failure.
        let ep = client
            .get_endpoint_by_id(ep.id)
            .await
            .unwrap_or_else(|_| ep.clone());
        let _ = remove_endpoint(client, &ep, made.namespace_created).await;
    } else if let Some(ns) = made.namespace_created {
        let _ = delete_namespace_if_empty(client, ns).await;
    }
}

async fn create<D: Driver>(
    d: &D,
    req: &Request<'_>,
    client: &Client,
    pod: &Pod<'_>,
    ns: Option<&Namespace>,
    ips: &[IpConfig],
    made: &mut Made,
) -> Result<Endpoint, CniError> {
    let (net, name) = (pod.net, pod.name.as_str());
    let mut doc = d.endpoint(req, client, net, name, ips).await?;
    doc.linux_interface_name = req.args.ifname.clone();
    let mut ep = client
        .create_endpoint(&doc)
        .await
        .hns("create the endpoint")?;
    made.endpoint = Some(ep.clone());
    if ips.is_empty() {
        // HNS IPAM: now that the addresses are known, parts that depend on them (win-overlay's
        // MAC, the loopback DSR policy) can be computed; if they differ, the endpoint is made
        // again with the same addresses.
        let assigned = assigned_addresses(net, &ep);
        if !assigned.is_empty() {
            let mut want = d.endpoint(req, client, net, name, &assigned).await?;
            want.linux_interface_name = req.args.ifname.clone();
            if want.mac_address != doc.mac_address || want.policies != doc.policies {
                client
                    .delete_endpoint(ep.id)
                    .await
                    .hns("replace the endpoint")?;
                made.endpoint = None;
                ep = client
                    .create_endpoint(&want)
                    .await
                    .hns("create the endpoint")?;
                made.endpoint = Some(ep.clone());
            }
        }
    }
    if let Some(ns) = ns {
        attach(client, ns, &ep).await?;
        ep.host_compute_namespace = ns.id;
    }
    Ok(ep)
}

/// DEL: the pod's endpoint and namespace (if made here) and its IPAM allocation. A workload
/// container leaving (`container:<id>`) leaves the pod's endpoint. Missing things are fine.
pub(crate) async fn del<D: Driver>(_d: &D, req: &Request<'_>) -> Result<(), CniError> {
    let cid = &req.args.container_id;
    // DEL must work with whatever CNI_NETNS is left; an unusable value is as good as none.
    let netns = NetNs::parse(&req.args.netns).unwrap_or(NetNs::Empty);
    if let NetNs::Container(s) = &netns
        && s != cid
    {
        return Ok(());
    }
    let client = client(req);
    let store = Store::open(&req.conf.state_dir(req.env), &req.conf.name)?;
    let mut lock = store.lock(cid)?;
    let record = lock.read()?;
    let name = endpoint_name(cid, &req.conf.name);
    if let Some(ep) = client
        .get_endpoint_by_name(&name)
        .await
        .hns("look up the pod's endpoint")?
    {
        let created_ns = match (&record, &netns) {
            (Some(r), _) => r.namespace_created,
            // Without a record, a namespace found by the same netns path is ours to remove.
            (None, NetNs::Path(p)) => namespace_of_path(&client, &p.to_string_lossy())
                .await?
                .filter(|ns| ns.id == ep.host_compute_namespace)
                .map(|ns| ns.id),
            (None, _) => None,
        };
        remove_endpoint(&client, &ep, created_ns).await?;
    } else if let Some(ns) = record.as_ref().and_then(|r| r.namespace_created) {
        delete_namespace_if_empty(&client, ns).await?;
    }
    if let Some(ipam) = Ipam::of(req.env, req.args, &req.conf) {
        let ifname = record
            .as_ref()
            .map_or(req.args.ifname.as_str(), |r| r.ifname.as_str());
        ipam.del(cid, ifname)?;
    }
    lock.remove()
}

/// CHECK: the endpoint exists on the network, is attached to the namespace of `CNI_NETNS`, has
/// the address, gateway and MAC of `prevResult` and every policy the config asks for; then
/// IPAM's own CHECK.
pub(crate) async fn check<D: Driver>(d: &D, req: &Request<'_>) -> Result<(), CniError> {
    let prev = req.conf.prev_result.as_ref().ok_or_else(|| {
        CniError::config("prevResult", "missing; CHECK compares HNS with the result of ADD, which the runtime passes as prevResult")
    })?;
    let prev = CniResult::parse(prev).map_err(|e| CniError::config("prevResult", e))?;
    let client = client(req);
    let netns = NetNs::parse(&req.args.netns)?;
    let failed = |msg: String| Err(CniError::new(Code::CHECK_FAILED, msg));
    let Some(net) = d.find_network(&client).await? else {
        return failed(format!(
            "HNS network \"{}\" no longer exists; the pod has no network",
            req.conf.name
        ));
    };
    let ns = match find_namespace(&client, &netns).await {
        Ok(ns) => ns,
        Err(e) if e.code == Code::INVALID_NETNS => return failed(e.msg),
        Err(e) => return Err(e),
    };
    let sandbox = pod_sandbox(&client, &netns, ns.as_ref(), &net, &req.args.container_id).await?;
    let name = endpoint_name(&sandbox, &net.name);
    let Some(ep) = client
        .get_endpoint_by_name(&name)
        .await
        .hns("look up the pod's endpoint")?
    else {
        return failed(format!(
            "endpoint {name} does not exist in HNS (removed behind the runtime's back?); the pod has no network until it is deleted and added again"
        ));
    };
    if ep.host_compute_network != net.id {
        return failed(format!(
            "endpoint {name} is on network {}, not on \"{}\" ({})",
            ep.host_compute_network, net.name, net.id
        ));
    }
    match (&netns, &ns) {
        (NetNs::Path(p), None) => {
            return failed(format!(
                "no HCN namespace has LinuxNetns {}; endpoint {name} is not attached to the pod's namespace",
                p.display()
            ));
        }
        (NetNs::Path(_) | NetNs::Guid(_), Some(ns)) if ep.host_compute_namespace != ns.id => {
            return failed(format!(
                "endpoint {name} is attached to namespace {}, not to the pod's namespace {}",
                if ep.host_compute_namespace.is_nil() {
                    "(none)".to_string()
                } else {
                    ep.host_compute_namespace.to_string()
                },
                ns.id
            ));
        }
        _ => {}
    }
    // The addresses the plugin reports for this endpoint (win-*: one; sdn* dual-stack: one
    // per family), each of which prevResult must hold.
    let assigned: Vec<IpConfig> = d
        .result(req.args, &net, &ep)
        .ips
        .into_iter()
        .map(|c| IpConfig {
            interface: None,
            ..c
        })
        .collect();
    if assigned.is_empty() {
        return failed(format!("endpoint {name} has no address"));
    }
    for current in &assigned {
        if let Err(msg) = check_address(&prev, &name, current) {
            return failed(msg);
        }
    }
    let mac = endpoint_mac(&ep);
    for i in prev.interfaces.iter().filter(|i| !i.mac.is_empty()) {
        if !same_mac(&i.mac, &mac) && (i.name == ep.name || i.name == req.args.ifname) {
            return failed(format!(
                "endpoint {name} has MAC {mac}, prevResult's interface {} has {}",
                i.name, i.mac
            ));
        }
    }
    let want = d.endpoint(req, &client, &net, &name, &assigned).await?;
    for p in &want.policies {
        if !ep.policies.contains(p) {
            let shown = serde_json::to_string(p).unwrap_or_default();
            return failed(format!(
                "endpoint {name} lacks the configured policy {shown}"
            ));
        }
    }
    if let Some(ipam) = Ipam::of(req.env, req.args, &req.conf) {
        let ifname = Store::open(&req.conf.state_dir(req.env), &req.conf.name)?
            .lock(&sandbox)?
            .read()?
            .map_or(req.args.ifname.clone(), |r| r.ifname);
        ipam.check(&sandbox, &ifname)?;
    }
    Ok(())
}

/// CHECK of one endpoint address against `prevResult`: listed, same prefix, same gateway.
fn check_address(prev: &CniResult, name: &str, current: &IpConfig) -> Result<(), String> {
    let address = current.address;
    let Some(expected) = prev.ips.iter().find(|c| c.address.addr() == address.addr()) else {
        let listed: Vec<String> = prev.ips.iter().map(|c| c.address.to_string()).collect();
        return Err(format!(
            "endpoint {name} has address {address}, prevResult has [{}]",
            listed.join(", ")
        ));
    };
    if expected.address.prefix_len() != address.prefix_len() {
        return Err(format!(
            "endpoint {name} has prefix {address}, prevResult has {}",
            expected.address
        ));
    }
    let gateway = current.gateway;
    if expected.gateway.is_some() && expected.gateway != gateway {
        return Err(format!(
            "endpoint {name} routes via {}, prevResult's gateway is {}",
            gateway.map_or("(none)".into(), |g| g.to_string()),
            expected.gateway.map_or("(none)".into(), |g| g.to_string())
        ));
    }
    Ok(())
}

fn same_mac(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.replace([':', '-'], "").to_ascii_lowercase();
    norm(a) == norm(b)
}

/// GC: removes the endpoints, namespaces and IPAM allocations of pods not among
/// `cni.dev/valid-attachments`; carries on past failures and reports them all.
pub(crate) async fn gc<D: Driver>(d: &D, req: &Request<'_>) -> Result<(), CniError> {
    let valid = req.conf.valid_attachments.as_ref().ok_or_else(|| {
        CniError::config("cni.dev/valid-attachments", "missing; GC removes every attachment not listed, so the runtime must list those to keep")
    })?;
    let keep: BTreeSet<&str> = valid.iter().map(|a| a.container_id.as_str()).collect();
    let client = client(req);
    let store = Store::open(&req.conf.state_dir(req.env), &req.conf.name)?;
    let mut candidates: BTreeSet<String> = store.sandboxes()?.into_iter().collect();
    if let Some(net) = d.find_network(&client).await? {
        let suffix = format!("_{}", net.name);
        let eps = client
            .list_endpoints_of_network(net.id)
            .await
            .hns("list the network's endpoints")?;
        candidates.extend(
            eps.iter()
                .filter(|ep| !ep.is_remote())
                .filter_map(|ep| ep.name.strip_suffix(&suffix))
                .filter(|s| crate::config::is_valid_name(s))
                .map(String::from),
        );
    }
    let ipam = Ipam::of(req.env, req.args, &req.conf);
    let mut errors = Vec::new();
    for sandbox in candidates.iter().filter(|s| !keep.contains(s.as_str())) {
        if let Err(e) = collect(&client, &store, ipam.as_ref(), &req.conf.name, sandbox).await {
            errors.push(e.context(&format!("collect {sandbox}")));
        }
    }
    if let Some(ipam) = &ipam
        && let Err(e) = ipam.gc()
    {
        errors.push(e);
    }
    let Some(first) = errors.first() else {
        return Ok(());
    };
    let all: Vec<String> = errors.iter().map(|e| e.msg.clone()).collect();
    Err(CniError::new(
        first.code,
        format!("GC: {} attachment(s) could not be collected", errors.len()),
    )
    .details(all.join("; ")))
}

async fn collect(
    client: &Client,
    store: &Store,
    ipam: Option<&Ipam<'_>>,
    network: &str,
    sandbox: &str,
) -> Result<(), CniError> {
    let mut lock: Lock = store.lock(sandbox)?;
    let record = lock.read()?;
    let name = endpoint_name(sandbox, network);
    if let Some(ep) = client
        .get_endpoint_by_name(&name)
        .await
        .hns("look up the endpoint")?
    {
        remove_endpoint(
            client,
            &ep,
            record.as_ref().and_then(|r| r.namespace_created),
        )
        .await?;
    }
    if let (Some(ipam), Some(r)) = (ipam, &record) {
        ipam.del(sandbox, &r.ifname)?;
    }
    lock.remove()
}

/// STATUS: hnsd answers, the driver is ready (network), and IPAM says it is ready.
pub(crate) async fn status<D: Driver>(d: &D, req: &Request<'_>) -> Result<(), CniError> {
    let client = client(req);
    if let Err(e) = client.get_version().await {
        // hnsd runs the data plane here, so pods already attached lose connectivity too.
        return Err(CniError::new(
            Code::LIMITED_CONNECTIVITY,
            format!("hnsd does not answer: {e}"),
        ));
    }
    d.status(&client).await?;
    if let Some(ipam) = Ipam::of(req.env, req.args, &req.conf) {
        ipam.status()?;
    }
    Ok(())
}
