//! A small CRI client (Kubernetes' container runtime interface, `runtime.v1`) over a runtime's
//! Unix socket: what a kubelet calls to make and remove a pod sandbox, which is where a
//! runtime runs the CNI plugins. Only the messages and fields those calls need are declared;
//! protobuf ignores the rest. Field numbers are those of `k8s.io/cri-api` `api.proto`.

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_prost::ProstCodec;

/// `PodSandboxMetadata`: which pod a sandbox is for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `PortMapping`: a pod port the runtime passes to CNI as `runtimeConfig.portMappings`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortMapping {
    /// `Protocol`: 0 TCP, 1 UDP, 2 SCTP.
    #[prost(int32, tag = "1")]
    pub protocol: i32,
    #[prost(int32, tag = "2")]
    pub container_port: i32,
    #[prost(int32, tag = "3")]
    pub host_port: i32,
    #[prost(string, tag = "4")]
    pub host_ip: String,
}

/// `PodSandboxConfig`: the pod as the kubelet describes it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(message, repeated, tag = "5")]
    pub port_mappings: Vec<PortMapping>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    config: Option<PodSandboxConfig>,
    #[prost(string, tag = "2")]
    runtime_handler: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pod_sandbox_id: String,
}

/// The request of StopPodSandbox, RemovePodSandbox and PodSandboxStatus (`pod_sandbox_id`).
#[derive(Clone, PartialEq, prost::Message)]
struct SandboxRequest {
    #[prost(string, tag = "1")]
    pod_sandbox_id: String,
}

/// An answer whose fields the test does not read.
#[derive(Clone, PartialEq, prost::Message)]
struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
struct PodSandbox {
    #[prost(string, tag = "1")]
    id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    items: Vec<PodSandbox>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodSandboxNetworkStatus {
    #[prost(string, tag = "1")]
    ip: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodSandboxStatus {
    #[prost(string, tag = "1")]
    id: String,
    /// `PodSandboxState`: 0 ready, 1 not ready.
    #[prost(int32, tag = "3")]
    state: i32,
    #[prost(message, optional, tag = "5")]
    network: Option<PodSandboxNetworkStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodSandboxStatusResponse {
    #[prost(message, optional, tag = "1")]
    status: Option<PodSandboxStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct VersionResponse {
    #[prost(string, tag = "2")]
    runtime_name: String,
    #[prost(string, tag = "3")]
    runtime_version: String,
}

/// A sandbox's state as `PodSandboxStatus` reports it.
#[derive(Debug)]
pub struct SandboxState {
    pub ready: bool,
    /// The pod's IP (from the CNI result's interface named like the runtime's `eth0`).
    pub ip: String,
}

/// A CRI runtime service at a Unix socket.
pub struct Cri {
    channel: Channel,
}

impl Cri {
    /// Connects to the runtime's socket.
    pub async fn connect(socket: PathBuf) -> Result<Cri, tonic::transport::Error> {
        // The URI is a placeholder: every connection goes to the socket.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(socket).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await?;
        Ok(Cri { channel })
    }

    async fn call<Q, A>(&self, method: &'static str, req: Q) -> Result<A, tonic::Status>
    where
        Q: prost::Message + 'static,
        A: prost::Message + Default + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
        let answer = grpc
            .unary(tonic::Request::new(req), path, ProstCodec::default())
            .await?;
        Ok(answer.into_inner())
    }

    /// `Version`: the runtime's name and version.
    pub async fn version(&self) -> Result<(String, String), tonic::Status> {
        let v: VersionResponse = self
            .call("/runtime.v1.RuntimeService/Version", Empty {})
            .await?;
        Ok((v.runtime_name, v.runtime_version))
    }

    /// `RunPodSandbox`: the sandbox's ID.
    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        let req = RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        let a: RunPodSandboxResponse = self
            .call("/runtime.v1.RuntimeService/RunPodSandbox", req)
            .await?;
        Ok(a.pod_sandbox_id)
    }

    /// `ListPodSandbox` without a filter: every sandbox's ID.
    pub async fn list_pod_sandboxes(&self) -> Result<Vec<String>, tonic::Status> {
        let a: ListPodSandboxResponse = self
            .call("/runtime.v1.RuntimeService/ListPodSandbox", Empty {})
            .await?;
        Ok(a.items.into_iter().map(|s| s.id).collect())
    }

    /// `PodSandboxStatus`.
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<SandboxState, tonic::Status> {
        let a: PodSandboxStatusResponse = self
            .call("/runtime.v1.RuntimeService/PodSandboxStatus", sandbox(id))
            .await?;
        let s = a.status.unwrap_or_default();
        Ok(SandboxState {
            ready: s.state == 0 && s.id == id,
            ip: s.network.map(|n| n.ip).unwrap_or_default(),
        })
    }

    /// `StopPodSandbox`: the runtime runs CNI DEL.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        self.call::<_, Empty>("/runtime.v1.RuntimeService/StopPodSandbox", sandbox(id))
            .await
            .map(drop)
    }

    /// `RemovePodSandbox`.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        self.call::<_, Empty>("/runtime.v1.RuntimeService/RemovePodSandbox", sandbox(id))
            .await
            .map(drop)
    }
}

fn sandbox(id: &str) -> SandboxRequest {
    SandboxRequest {
        pod_sandbox_id: id.to_string(),
    }
}
