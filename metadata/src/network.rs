//! The quorum's internal RPC over plain TCP: openraft's AppendEntries, Vote and
//! InstallSnapshot, plus the forwarding of proposals, learner joins and broker heartbeats to
//! the leader.
//!
//! Wire format: each message is one frame, a 4-byte big-endian length followed by that many
//! bytes of JSON ([`RpcRequest`] one way, [`RpcResponse`] the other). A connection carries one
//! request at a time; openraft keeps one connection per replication target. Frames above
//! [`MAX_FRAME_BYTES`] are refused before anything is allocated, and a frame's memory grows
//! with the bytes that arrive, not with the length it claims.
//!
//! Bad input: an undecodable request gets [`RpcResponse::BadRequest`] and the connection is
//! closed; an oversized or truncated frame closes the connection. The server keeps serving
//! every other connection.
//!
//! Cancellation and shutdown: the accept loop and every connection task watch the node's
//! `CancellationToken` and are tracked by its `TaskTracker`; a request being handled when the
//! token fires is abandoned (openraft treats that like a lost message).
//!
//! Retries: client calls fail fast (a broken connection is dropped and reopened by the next
//! call); openraft retries replication itself, and the node retries forwarding only when the
//! request provably did not reach a leader (connect failure or a "not leader" answer), or
//! when it is idempotent (a heartbeat).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    ClientWriteError, Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError,
    Timeout, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{ChangeMembers, RPCTypes, Raft, RaftNetwork, RaftNetworkFactory};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::command::{Command, CommandResult};
use crate::ids::{BrokerEpoch, BrokerId, Uuid128};
use crate::sessions::{heartbeat_on_leader, Sessions};
use crate::store::MetadataImage;
use crate::voters::{
    add_voter_on_leader, remove_voter_on_leader, set_directory_on_leader, QuorumNode, VoterRefusal,
};
use crate::TypeConfig;

/// The largest frame either side accepts.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// A request from one node to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// Commit a command; only the leader accepts it.
    Propose(Command),
    /// Add (or re-address) a learner; only the leader accepts it.
    AddLearner {
        node_id: u64,
        addr: String,
    },
    /// A broker's heartbeat; only the leader accepts it, and keeps it in memory
    /// ([`crate::sessions`]).
    Heartbeat {
        id: BrokerId,
        broker_epoch: BrokerEpoch,
    },
    /// AddRaftVoter ([`crate::voters`]); only the leader accepts it.
    AddVoter {
        node_id: u64,
        directory_id: Uuid128,
        endpoints: Vec<String>,
        timeout_ms: u64,
    },
    /// RemoveRaftVoter ([`crate::voters`]); only the leader accepts it.
    RemoveVoter {
        node_id: u64,
        directory_id: Uuid128,
        timeout_ms: u64,
    },
    /// A node's metadata log dir id ([`crate::voters`]); only the leader accepts it.
    SetDirectory {
        node_id: u64,
        directory_id: Uuid128,
    },
}

/// The answer to an [`RpcRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// For `Propose`, `AddLearner` and `Heartbeat`.
    Leader(Result<LeaderReply, LeaderError>),
    /// The request could not be decoded; the connection is closed after this.
    BadRequest(String),
}

/// What the leader did with a forwarded request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaderReply {
    /// The command is committed at `log_index`, with the result every node computes.
    Proposed {
        log_index: u64,
        result: CommandResult,
    },
    /// The learner is in the membership (`log_index` is `None` if it already was).
    LearnerAdded { log_index: Option<u64> },
    /// The heartbeat was checked against the leader's state (nothing was written).
    Heartbeat { result: CommandResult },
    /// A voter change ([`crate::voters`]) committed at the log index, or refused.
    VotersChanged(Result<u64, VoterRefusal>),
}

/// Why a node did not execute a leader-only request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum LeaderError {
    /// Not the leader: try `leader_addr` if known, else wait for an election.
    #[error("not the metadata leader (leader: {leader_id:?} at {leader_addr:?})")]
    NotLeader {
        leader_id: Option<u64>,
        leader_addr: Option<String>,
    },
    #[error("the metadata node is shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Failed(String),
}

/// Why an RPC call failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// Nothing was sent: the peer could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error("no response within {0:?}")]
    Timeout(Duration),
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_BYTES}")]
    FrameTooLarge { len: usize },
    #[error("cannot decode a message: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("cannot encode a message: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("the peer rejected the request as malformed: {0}")]
    BadRequest(String),
    #[error("unexpected response to {0}")]
    UnexpectedResponse(&'static str),
}

impl RpcError {
    /// True when the request certainly did not reach the peer, so resending cannot
    /// duplicate it.
    pub fn request_not_sent(&self) -> bool {
        matches!(self, RpcError::Connect { .. } | RpcError::Encode(_))
    }
}

// ----- framing -----

async fn write_message<W: AsyncWrite + Unpin, T: Serialize>(
    writer: &mut W,
    message: &T,
) -> Result<(), RpcError> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).map_err(RpcError::Encode)?;
    let len = frame.len() - 4;
    if len > MAX_FRAME_BYTES {
        return Err(RpcError::FrameTooLarge { len });
    }
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

/// Reads one message; `Ok(None)` when the peer closed the connection between frames.
///
/// The body grows as its bytes arrive: a length alone (4 bytes claiming 64 MiB, from anyone
/// who can reach the port) reserves at most [`FRAME_RESERVE`].
async fn read_message<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
) -> Result<Option<T>, RpcError> {
    let mut header = [0u8; 4];
    let first = reader.read(&mut header).await?;
    if first == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut header[first..]).await?;
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(RpcError::FrameTooLarge { len });
    }
    let mut body = Vec::with_capacity(len.min(FRAME_RESERVE));
    let read = (&mut *reader)
        .take(len as u64)
        .read_to_end(&mut body)
        .await?;
    if read < len {
        return Err(RpcError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(RpcError::Decode)
}

/// What a frame's length reserves before its bytes arrive.
const FRAME_RESERVE: usize = 64 * 1024;

/// Decodes the requests of a byte stream as the RPC server does (for the fuzz target): how
/// many decoded before the first error or the end.
#[doc(hidden)]
pub async fn decode_requests(mut data: &[u8]) -> usize {
    let mut decoded = 0;
    while let Ok(Some(_)) = read_message::<_, RpcRequest>(&mut data).await {
        decoded += 1;
    }
    decoded
}

/// One request as a frame, as a node sends it (for the fuzz target's seeds).
#[doc(hidden)]
pub async fn encode_request(request: &RpcRequest) -> Vec<u8> {
    let mut out = Vec::new();
    write_message(&mut out, request)
        .await
        .expect("a request encodes into memory");
    out
}

// ----- client -----

/// A connection to one peer, opened on first use and reopened after any failure.
pub(crate) struct RpcClient {
    addr: String,
    connection: Option<BufReader<TcpStream>>,
}

impl RpcClient {
    pub(crate) fn new(addr: impl Into<String>) -> Self {
        RpcClient {
            addr: addr.into(),
            connection: None,
        }
    }

    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `request` and waits for its response, within `timeout` in all.
    pub(crate) async fn call(
        &mut self,
        request: &RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, RpcError> {
        let result = tokio::time::timeout(timeout, self.exchange(request)).await;
        let result = result.unwrap_or(Err(RpcError::Timeout(timeout)));
        if result.is_err() {
            self.connection = None;
        }
        match result {
            Ok(RpcResponse::BadRequest(reason)) => {
                self.connection = None;
                Err(RpcError::BadRequest(reason))
            }
            other => other,
        }
    }

    async fn exchange(&mut self, request: &RpcRequest) -> Result<RpcResponse, RpcError> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => {
                let stream =
                    TcpStream::connect(&self.addr)
                        .await
                        .map_err(|source| RpcError::Connect {
                            addr: self.addr.clone(),
                            source,
                        })?;
                stream.set_nodelay(true)?;
                self.connection.insert(BufReader::new(stream))
            }
        };
        write_message(connection.get_mut(), request).await?;
        match read_message(connection).await? {
            Some(response) => Ok(response),
            None => Err(RpcError::Io(std::io::ErrorKind::UnexpectedEof.into())),
        }
    }
}

/// Creates the per-target clients openraft replicates through.
pub(crate) struct NetworkFactory {
    pub(crate) node_id: u64,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: u64, node: &QuorumNode) -> PeerNetwork {
        PeerNetwork {
            node_id: self.node_id,
            target,
            client: RpcClient::new(node.addr.clone()),
        }
    }
}

/// openraft's view of one peer.
pub(crate) struct PeerNetwork {
    node_id: u64,
    target: u64,
    client: RpcClient,
}

impl PeerNetwork {
    async fn call<E: std::error::Error>(
        &mut self,
        action: RPCTypes,
        request: RpcRequest,
        option: &RPCOption,
    ) -> Result<RpcResponse, RPCError<u64, QuorumNode, RaftError<u64, E>>> {
        let timeout = option.hard_ttl();
        self.client
            .call(&request, timeout)
            .await
            .map_err(|error| match error {
                RpcError::Connect { .. } => RPCError::Unreachable(Unreachable::new(&error)),
                RpcError::Timeout(_) => RPCError::Timeout(Timeout {
                    action,
                    id: self.node_id,
                    target: self.target,
                    timeout,
                }),
                other => RPCError::Network(NetworkError::new(&other)),
            })
    }

    fn remote<E: std::error::Error>(
        &self,
        error: RaftError<u64, E>,
    ) -> RPCError<u64, QuorumNode, RaftError<u64, E>> {
        RPCError::RemoteError(RemoteError::new(self.target, error))
    }

    fn unexpected<E: std::error::Error>(
        what: &'static str,
    ) -> RPCError<u64, QuorumNode, RaftError<u64, E>> {
        RPCError::Network(NetworkError::new(&RpcError::UnexpectedResponse(what)))
    }
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, QuorumNode, RaftError<u64>>> {
        let request = RpcRequest::AppendEntries(rpc);
        match self.call(RPCTypes::AppendEntries, request, &option).await? {
            RpcResponse::AppendEntries(result) => result.map_err(|e| self.remote(e)),
            _ => Err(Self::unexpected("AppendEntries")),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, QuorumNode, RaftError<u64, InstallSnapshotError>>,
    > {
        let request = RpcRequest::InstallSnapshot(rpc);
        match self
            .call(RPCTypes::InstallSnapshot, request, &option)
            .await?
        {
            RpcResponse::InstallSnapshot(result) => result.map_err(|e| self.remote(e)),
            _ => Err(Self::unexpected("InstallSnapshot")),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, QuorumNode, RaftError<u64>>> {
        let request = RpcRequest::Vote(rpc);
        match self.call(RPCTypes::Vote, request, &option).await? {
            RpcResponse::Vote(result) => result.map_err(|e| self.remote(e)),
            _ => Err(Self::unexpected("Vote")),
        }
    }
}

// ----- leader-only requests, served locally or for other nodes -----

pub(crate) fn leader_error(
    error: RaftError<u64, ClientWriteError<u64, QuorumNode>>,
) -> LeaderError {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => LeaderError::NotLeader {
            leader_id: forward.leader_id,
            leader_addr: forward.leader_node.map(|n| n.addr),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            LeaderError::Failed(e.to_string())
        }
        RaftError::Fatal(Fatal::Stopped) => LeaderError::ShuttingDown,
        RaftError::Fatal(fatal) => LeaderError::Failed(fatal.to_string()),
    }
}

/// Commits `command` if this node is the leader.
pub(crate) async fn propose_on_leader(
    raft: &Raft<TypeConfig>,
    command: Command,
) -> Result<LeaderReply, LeaderError> {
    let response = raft.client_write(command).await.map_err(leader_error)?;
    Ok(LeaderReply::Proposed {
        log_index: response.log_id.index,
        result: response.data,
    })
}

/// Adds `node_id` as a learner at `addr` if this node is the leader; a learner already
/// known at another address is re-addressed, a voter never is (voters are configuration).
pub(crate) async fn add_learner_on_leader(
    raft: &Raft<TypeConfig>,
    node_id: u64,
    addr: String,
) -> Result<LeaderReply, LeaderError> {
    let (known, is_voter) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        (
            membership.get_node(&node_id).cloned(),
            membership.voter_ids().any(|id| id == node_id),
        )
    };
    let node = QuorumNode {
        addr: addr.clone(),
        directory_id: known.as_ref().and_then(|n| n.directory_id),
    };
    let response = match known {
        Some(existing) if existing == node => {
            return Ok(LeaderReply::LearnerAdded { log_index: None });
        }
        Some(existing) if is_voter => {
            return Err(LeaderError::Failed(format!(
                "node {node_id} is a voter at {}; voters change through the voter configuration, not by joining at {addr}",
                existing.addr
            )));
        }
        Some(_) => {
            let nodes = BTreeMap::from([(node_id, node)]);
            raft.change_membership(ChangeMembers::SetNodes(nodes), true)
                .await
        }
        None => raft.add_learner(node_id, node, false).await,
    };
    let response = response.map_err(leader_error)?;
    Ok(LeaderReply::LearnerAdded {
        log_index: Some(response.log_id.index),
    })
}

// ----- server -----

/// What the RPC server answers requests with.
#[derive(Clone)]
pub(crate) struct Server {
    pub(crate) raft: Raft<TypeConfig>,
    pub(crate) images: watch::Receiver<MetadataImage>,
    pub(crate) sessions: Arc<Sessions>,
}

/// Accepts connections until `cancel` fires; each connection is served on its own task.
pub(crate) async fn serve(
    listener: TcpListener,
    server: Server,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let server = server.clone();
                let cancel = cancel.clone();
                tracker.spawn(async move {
                    if let Err(error) = serve_connection(stream, &server, &cancel).await {
                        tracing::debug!(%peer, %error, "metadata RPC connection closed");
                    }
                });
            }
            Err(error) => {
                // Typically out of file descriptors: back off instead of spinning.
                tracing::warn!(%error, "metadata RPC listener cannot accept");
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    server: &Server,
    cancel: &CancellationToken,
) -> Result<(), RpcError> {
    stream.set_nodelay(true)?;
    let (reader, writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let mut writer = BufWriter::new(writer);
    loop {
        let request = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            request = read_message::<_, RpcRequest>(&mut reader) => request,
        };
        let request = match request {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()),
            Err(RpcError::Decode(error)) => {
                let response = RpcResponse::BadRequest(error.to_string());
                write_message(&mut writer, &response).await?;
                return Err(RpcError::Decode(error));
            }
            Err(error) => return Err(error),
        };
        let response = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            response = handle(server, request) => response,
        };
        write_message(&mut writer, &response).await?;
    }
}

async fn handle(server: &Server, request: RpcRequest) -> RpcResponse {
    let raft = &server.raft;
    match request {
        RpcRequest::AppendEntries(rpc) => {
            RpcResponse::AppendEntries(raft.append_entries(rpc).await)
        }
        RpcRequest::Vote(rpc) => RpcResponse::Vote(raft.vote(rpc).await),
        RpcRequest::InstallSnapshot(rpc) => {
            RpcResponse::InstallSnapshot(raft.install_snapshot(rpc).await)
        }
        RpcRequest::Propose(command) => RpcResponse::Leader(propose_on_leader(raft, command).await),
        RpcRequest::AddLearner { node_id, addr } => {
            RpcResponse::Leader(add_learner_on_leader(raft, node_id, addr).await)
        }
        RpcRequest::Heartbeat { id, broker_epoch } => RpcResponse::Leader(heartbeat_on_leader(
            raft,
            &server.images,
            &server.sessions,
            id,
            broker_epoch,
        )),
        RpcRequest::AddVoter {
            node_id,
            directory_id,
            endpoints,
            timeout_ms,
        } => RpcResponse::Leader(
            add_voter_on_leader(
                raft,
                node_id,
                directory_id,
                endpoints,
                Duration::from_millis(timeout_ms),
            )
            .await,
        ),
        RpcRequest::RemoveVoter {
            node_id,
            directory_id,
            timeout_ms,
        } => RpcResponse::Leader(
            remove_voter_on_leader(
                raft,
                node_id,
                directory_id,
                Duration::from_millis(timeout_ms),
            )
            .await,
        ),
        RpcRequest::SetDirectory {
            node_id,
            directory_id,
        } => RpcResponse::Leader(set_directory_on_leader(raft, node_id, directory_id).await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_round_trip_through_frames() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let request = RpcRequest::AddLearner {
            node_id: 4,
            addr: "127.0.0.1:9999".into(),
        };
        write_message(&mut client, &request).await.unwrap();
        drop(client);
        let got: RpcRequest = read_message(&mut server).await.unwrap().unwrap();
        assert!(matches!(got, RpcRequest::AddLearner { node_id: 4, .. }));
        // A clean close between frames is not an error.
        assert!(read_message::<_, RpcRequest>(&mut server)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn a_length_without_its_bytes_reserves_little_and_is_an_error() {
        let mut frame = (MAX_FRAME_BYTES as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let err = read_message::<_, RpcRequest>(&mut &frame[..])
            .await
            .unwrap_err();
        assert!(matches!(err, RpcError::Io(_)), "{err}");
        let one = encode_request(&RpcRequest::SetDirectory {
            node_id: 2,
            directory_id: Uuid128([2; 16]),
        })
        .await;
        assert_eq!(decode_requests(&[one.clone(), one].concat()).await, 2);
    }

    #[tokio::test]
    async fn oversized_truncated_and_garbage_frames_are_errors() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        let err = read_message::<_, RpcRequest>(&mut server)
            .await
            .unwrap_err();
        assert!(matches!(err, RpcError::FrameTooLarge { .. }), "{err}");

        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(&10u32.to_be_bytes()).await.unwrap();
        client.write_all(b"abc").await.unwrap();
        drop(client);
        let err = read_message::<_, RpcRequest>(&mut server)
            .await
            .unwrap_err();
        assert!(matches!(err, RpcError::Io(_)), "{err}");

        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(&3u32.to_be_bytes()).await.unwrap();
        client.write_all(b"{x}").await.unwrap();
        let err = read_message::<_, RpcRequest>(&mut server)
            .await
            .unwrap_err();
        assert!(matches!(err, RpcError::Decode(_)), "{err}");
    }
}
