//! What the proxy's tests against a real hnsd share: an in-process hnsd holding the node's
//! network `cbr0` as flannel makes it, and pod endpoints made as the CNI makes them.

use hcn::{Endpoint, Guid};
use hns::Profile;
use hns_client::Client;
use serde_json::json;
use testkit::hnsd::{Hnsd, create_network};

/// An hnsd under `profile` with network `cbr0`: L2Bridge dual-stack (10.244.1.0/24 and
/// fd00:244:1::/64), or Overlay (10.244.1.0/24, VSID 4096, a RemoteSubnetRoute to
/// 10.244.2.0/24 at 192.168.0.12).
pub async fn hnsd_with_cbr0(profile: Profile, overlay: bool) -> (Hnsd, hcn::Network) {
    let hnsd = Hnsd::start(profile).await;
    let net = if overlay {
        json!({"Name":"cbr0","Type":"Overlay","Ipams":[{"Subnets":[{"IpAddressPrefix":"10.244.1.0/24",
            "Policies":[{"Type":"VSID","Settings":{"IsolationId":4096}}],
            "Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
            "Policies":[{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.2.0/24",
            "IsolationId":4096,"ProviderAddress":"192.168.0.12","DistributedRouterMacAddress":"02-00-00-00-00-01"}}]})
    } else {
        json!({"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Subnets":[
            {"IpAddressPrefix":"10.244.1.0/24","Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]},
            {"IpAddressPrefix":"fd00:244:1::/64","Routes":[{"NextHop":"fd00:244:1::1","DestinationPrefix":"::/0"}]}]}]})
    };
    let net = create_network(&hnsd.client(), &net).await;
    (hnsd, net)
}

/// A local endpoint `name` on `net` with `addresses` (address, prefix length), as the CNI makes it.
pub async fn endpoint(
    client: &Client,
    net: &hcn::Network,
    name: &str,
    addresses: &[(&str, u8)],
) -> Guid {
    let ep = Endpoint {
        name: name.into(),
        host_compute_network: net.id,
        ip_configurations: addresses
            .iter()
            .map(|(ip, len)| hcn::IpConfig {
                ip_address: Some(ip.parse().unwrap()),
                prefix_length: *len,
            })
            .collect(),
        ..Default::default()
    };
    client.create_endpoint(&ep).await.unwrap().id
}
