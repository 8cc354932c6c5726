//! Kafka wire framing and request/response envelopes, free of I/O.
//!
//! A frame is a 4-byte big-endian size followed by that many bytes. A request starts with
//! `api_key`, `api_version`, `correlation_id`; the rest of the header and the body are decoded
//! with the `kafka-protocol` crate. Requests are decoded from `Bytes`, so produce records are
//! zero-copy slices of the frame.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;

use crate::log::segment::FileSlice;

/// The APIs a server serves and the versions it accepts, in the order ApiVersions lists
/// them. The list lives with the handlers (`api::API_TABLE`, which also drives dispatch);
/// framing only consults it.
#[derive(Clone, Copy)]
pub struct ApiTable {
    pub keys: &'static [ApiKey],
    /// (min, max) version accepted for an API, if it is served at all.
    pub versions: fn(ApiKey) -> Option<(i16, i16)>,
}

impl ApiTable {
    /// The `api_keys` list of an ApiVersions response.
    pub fn api_versions_list(&self) -> Vec<ApiVersion> {
        self.keys
            .iter()
            .filter_map(|&k| {
                let (min, max) = (self.versions)(k)?;
                let mut v = ApiVersion::default();
                v.api_key = k as i16;
                v.min_version = min;
                v.max_version = max;
                Some(v)
            })
            .collect()
    }
}

/// Why a frame could not be turned into a request. Every variant closes the connection,
/// except `UnsupportedApiVersions`, which gets Kafka's v0 error reply first.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("request of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    #[error("unsupported version {version} of {api:?}")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// A decoded request.
pub struct Request {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub body: RequestKind,
    /// Size of the frame, for metrics and quotas.
    pub size: usize,
}

/// Peeks at api key, version and correlation id.
pub fn peek_header(frame: &[u8]) -> Result<(i16, i16, i32), FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::TooShort(frame.len()));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    Ok((key, version, correlation_id))
}

/// Decodes one request frame (without the size prefix) of an API `table` serves.
pub fn decode_request(mut frame: Bytes, table: &ApiTable) -> Result<Request, FrameError> {
    let size = frame.len();
    let (key, version, correlation_id) = peek_header(&frame)?;
    let api_key = ApiKey::try_from(key).map_err(|_| FrameError::UnknownApiKey(key))?;
    match (table.versions)(api_key) {
        Some((min, max)) if version >= min && version <= max => {}
        _ => {
            return Err(FrameError::UnsupportedVersion {
                api: api_key,
                version,
                correlation_id,
            })
        }
    }
    let malformed = |reason: String| FrameError::Malformed {
        api: api_key,
        version,
        reason,
    };
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|e| malformed(e.to_string()))?;
    let body = RequestKind::decode(api_key, &mut frame, version)
        .map_err(|e| malformed(format!("{e:#}")))?;
    Ok(Request {
        header,
        api_key,
        body,
        size,
    })
}

/// One piece of a response frame, written in order; also what a fetch read of one partition
/// gives (its records in memory, or still in the segment file).
#[derive(Clone)]
pub enum Chunk {
    Bytes(Bytes),
    /// A record set still in its segment file: sent from the page cache (`sendfile` on a
    /// plaintext socket), never copied into the frame.
    File(FileSlice),
}

impl Chunk {
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.len(),
            Chunk::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The record sets of a response that stay in their segment files until the response is
/// written. The response holds a stand-in for each ([`FileRecords::stand_in`]): a `Bytes` of
/// the same length at an address no other stand-in of the response has, which the encoder's
/// [`SpliceBuf`] swaps for the file range. The encoder never reads a record set's bytes, only
/// its length and address.
#[derive(Default)]
pub struct FileRecords {
    /// Each stand-in with the pieces it stands for, in order (file ranges, or bytes in
    /// memory held by reference).
    entries: Vec<(Bytes, Vec<Chunk>)>,
    /// Bytes of the stand-in region this response's stand-ins use.
    used: usize,
}

/// The stand-ins' address range: zeroed memory reserved once and never touched (so it costs
/// address space, not memory). A response whose stand-ins would pass its end gets the rest of
/// its record sets read into memory instead.
static STAND_INS: std::sync::LazyLock<&'static [u8]> =
    std::sync::LazyLock::new(|| Box::leak(vec![0u8; 256 << 20].into_boxed_slice()));

impl FileRecords {
    /// A stand-in for `slice` in the response, or `None` (read the slice instead) when it is
    /// smaller than [`SpliceBuf::MIN_SPLICE`] (the encoder would copy the stand-in's zeros)
    /// or the response's stand-ins already span the region.
    pub fn stand_in(&mut self, slice: FileSlice) -> Option<Bytes> {
        self.stand_in_pieces(vec![Chunk::File(slice)])
    }

    /// A stand-in for a record set made of `pieces` (a remote read: ranges of cache files
    /// and bytes in memory), or `None` (copy the pieces instead) as for [`Self::stand_in`].
    pub fn stand_in_pieces(&mut self, pieces: Vec<Chunk>) -> Option<Bytes> {
        let len: usize = pieces.iter().map(Chunk::len).sum();
        if len < SpliceBuf::MIN_SPLICE {
            return None;
        }
        let end = self.used.checked_add(len)?;
        let region: &'static [u8] = &STAND_INS;
        let stand_in = Bytes::from_static(region.get(self.used..end)?);
        self.used = end;
        self.entries.push((stand_in.clone(), pieces));
        Some(stand_in)
    }

    fn pieces_of(&self, records: &Bytes) -> Option<&Vec<Chunk>> {
        self.entries
            .iter()
            .find(|(b, _)| b.as_ptr() == records.as_ptr() && b.len() == records.len())
            .map(|(_, f)| f)
    }
}

/// Encodes a response frame, size prefix included, as a list of chunks to write in order.
///
/// Fetched record bytes are not copied into the frame: [`SpliceBuf`] recognises them when the
/// encoder writes them and emits them as their own chunks, so a fetch response goes from the
/// segment file to the socket without passing through the broker's memory (`files`), or with
/// one copy (the file read) for record sets read into memory.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
    files: &FileRecords,
) -> anyhow::Result<Vec<Chunk>> {
    let mut buf = SpliceBuf::new(records_of(body, files));
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header.encode(&mut buf, api_key.response_header_version(version))?;
    body.encode_into(&mut buf, version)?;
    Ok(buf.finish())
}

/// The record sets of a fetch response, to be spliced rather than copied: each with its file
/// range when `files` has a stand-in for it.
fn records_of(body: &ResponseKind, files: &FileRecords) -> Vec<(Bytes, Option<Vec<Chunk>>)> {
    match body {
        ResponseKind::Fetch(f) => f
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|p| p.records.clone()))
            .filter(|r| r.len() >= SpliceBuf::MIN_SPLICE)
            .map(|r| {
                let file = files.pieces_of(&r).cloned();
                (r, file)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Encodes one response body; the crate's `ResponseKind::encode` only targets `BytesMut`.
trait EncodeInto {
    fn encode_into(&self, buf: &mut SpliceBuf, version: i16) -> anyhow::Result<()>;
}

impl EncodeInto for ResponseKind {
    fn encode_into(&self, buf: &mut SpliceBuf, version: i16) -> anyhow::Result<()> {
        match self {
            ResponseKind::Fetch(f) => f.encode(buf, version),
            other => {
                let mut tmp = BytesMut::with_capacity(256);
                other.encode(&mut tmp, version)?;
                buf.put_slice(&tmp);
                Ok(())
            }
        }
    }
}

/// An encode target that copies small writes into a buffer but takes registered `Bytes`
/// (fetched record sets) by reference, as separate chunks, or swaps them for the file range
/// they stand in for.
///
/// kafka-protocol's message encoders write sequentially (they never seek back to fill gaps),
/// which is what makes this possible; `seek`/`range` only support the unflushed tail.
pub struct SpliceBuf {
    head: BytesMut,
    chunks: Vec<Chunk>,
    flushed: usize,
    splice: Vec<(Bytes, Option<Vec<Chunk>>)>,
}

impl SpliceBuf {
    /// Record sets smaller than this are cheaper to copy than to send as their own chunk.
    pub const MIN_SPLICE: usize = 4096;

    pub fn new(splice: Vec<(Bytes, Option<Vec<Chunk>>)>) -> Self {
        SpliceBuf {
            head: BytesMut::with_capacity(256),
            chunks: Vec::new(),
            flushed: 0,
            splice,
        }
    }

    fn flush_head(&mut self) {
        if !self.head.is_empty() {
            let h = self.head.split().freeze();
            self.flushed += h.len();
            self.chunks.push(Chunk::Bytes(h));
        }
    }

    /// The frame: a size prefix followed by the chunks.
    pub fn finish(mut self) -> Vec<Chunk> {
        self.flush_head();
        let len = self.flushed as i32;
        let mut out = Vec::with_capacity(self.chunks.len() + 1);
        out.push(Chunk::Bytes(Bytes::copy_from_slice(&len.to_be_bytes())));
        out.extend(self.chunks);
        out
    }
}

unsafe impl BufMut for SpliceBuf {
    fn remaining_mut(&self) -> usize {
        self.head.remaining_mut()
    }
    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: forwarded to the inner BytesMut, whose chunk_mut we handed out.
        unsafe { self.head.advance_mut(cnt) }
    }
    fn chunk_mut(&mut self) -> &mut bytes::buf::UninitSlice {
        self.head.chunk_mut()
    }
    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= Self::MIN_SPLICE {
            if let Some((b, file)) = self
                .splice
                .iter()
                .find(|(b, _)| b.as_ptr() == src.as_ptr() && b.len() == src.len())
                .cloned()
            {
                self.flush_head();
                self.flushed += b.len();
                match file {
                    Some(pieces) => self.chunks.extend(pieces),
                    None => self.chunks.push(Chunk::Bytes(b)),
                }
                return;
            }
        }
        self.head.extend_from_slice(src);
    }
}

impl kafka_protocol::protocol::buf::ByteBufMut for SpliceBuf {
    fn offset(&self) -> usize {
        self.flushed + self.head.len()
    }
    fn seek(&mut self, offset: usize) {
        debug_assert!(offset >= self.flushed, "seek into a flushed chunk");
        self.head.resize(offset.saturating_sub(self.flushed), 0);
    }
    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        debug_assert!(r.start >= self.flushed, "range in a flushed chunk");
        let start = r.start.saturating_sub(self.flushed).min(self.head.len());
        let end = r
            .end
            .saturating_sub(self.flushed)
            .clamp(start, self.head.len());
        &mut self.head[start..end]
    }
}

/// Kafka's answer to an ApiVersions request at a version it does not know: a v0 response
/// (header v0) with UNSUPPORTED_VERSION and the full list, so the client can retry lower.
pub fn unsupported_api_versions_response(correlation_id: i32, table: &ApiTable) -> BytesMut {
    let mut body = ApiVersionsResponse::default();
    body.error_code = ResponseError::UnsupportedVersion.code();
    body.api_keys = table.api_versions_list();
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    buf.put_i32(correlation_id);
    body.encode(&mut buf, 0)
        .expect("ApiVersions v0 always encodes");
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf
}

/// Reads the 4-byte size prefix, if present.
pub fn frame_size(prefix: &[u8; 4]) -> i32 {
    (&prefix[..]).get_i32()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::API_TABLE;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};

    fn frame_for<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
        let mut buf = BytesMut::new();
        let mut h = RequestHeader::default();
        h.request_api_key = key as i16;
        h.request_api_version = version;
        h.correlation_id = 42;
        h.encode(&mut buf, key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_a_flexible_request() {
        let r = decode_request(
            frame_for(ApiKey::Metadata, 12, &MetadataRequest::default()),
            &API_TABLE,
        )
        .unwrap();
        assert_eq!(r.header.correlation_id, 42);
        assert!(matches!(r.body, RequestKind::Metadata(_)));
    }

    #[test]
    fn too_new_api_versions_is_reported_with_its_correlation_id() {
        let f = frame_for(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        let mut raw = f.to_vec();
        raw[2..4].copy_from_slice(&99i16.to_be_bytes());
        match decode_request(Bytes::from(raw), &API_TABLE) {
            Err(FrameError::UnsupportedVersion {
                api: ApiKey::ApiVersions,
                version: 99,
                correlation_id: 42,
            }) => {}
            other => panic!("unexpected {:?}", other.err()),
        }
        let resp = unsupported_api_versions_response(42, &API_TABLE);
        let mut body = resp.freeze().slice(4..);
        assert_eq!(body.get_i32(), 42);
        let decoded = ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(decoded.error_code, 35);
        assert!(decoded
            .api_keys
            .iter()
            .any(|k| k.api_key == 18 && k.max_version == 5));
    }

    #[test]
    fn fetched_records_are_spliced_not_copied_and_the_frame_is_identical() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::FetchResponse;
        use std::io::Write;
        use std::sync::Arc;
        let records = Bytes::from(vec![7u8; 10_000]);
        let small = Bytes::from(vec![1u8; 100]);
        // A record set still in its file: 9,000 bytes from position 500.
        let mut file = tempfile::tempfile().unwrap();
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&content).unwrap();
        let slice = FileSlice {
            file: Arc::new(file),
            position: 500,
            len: 9_000,
        };
        let mut files = FileRecords::default();
        let stand_in = files.stand_in(slice.clone()).unwrap();
        let too_small = FileSlice {
            len: SpliceBuf::MIN_SPLICE - 1,
            ..slice.clone()
        };
        assert!(files.stand_in(too_small).is_none(), "would be copied");
        // A remote read: the end of one cache file, bytes in memory, the start of another.
        let middle = Bytes::from(vec![9u8; 3_000]);
        let pieces = vec![
            Chunk::File(FileSlice {
                position: 8_000,
                len: 2_000,
                ..slice.clone()
            }),
            Chunk::Bytes(middle.clone()),
            Chunk::File(FileSlice {
                position: 0,
                len: 4_000,
                ..slice.clone()
            }),
        ];
        let remote_stand_in = files.stand_in_pieces(pieces).unwrap();
        let mut remote_content = content[8_000..].to_vec();
        remote_content.extend_from_slice(&middle);
        remote_content.extend_from_slice(&content[..4_000]);
        let partitions = |file_records: Bytes, remote: Bytes| {
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_partitions(vec![
                    PartitionData::default()
                        .with_partition_index(0)
                        .with_records(Some(records.clone())),
                    PartitionData::default()
                        .with_partition_index(1)
                        .with_records(Some(small.clone())),
                    PartitionData::default()
                        .with_partition_index(2)
                        .with_records(Some(file_records)),
                    PartitionData::default()
                        .with_partition_index(3)
                        .with_records(Some(remote)),
                ])])
        };
        let body = partitions(stand_in, remote_stand_in);
        let real = partitions(
            Bytes::copy_from_slice(&content[500..9_500]),
            Bytes::from(remote_content),
        );
        for version in [4i16, 12, 16] {
            let kind = ResponseKind::Fetch(body.clone());
            let chunks = encode_response(ApiKey::Fetch, version, 9, &kind, &files).unwrap();
            assert!(
                chunks
                    .iter()
                    .any(|c| matches!(c, Chunk::Bytes(b) if b.as_ptr() == records.as_ptr())),
                "records were copied at v{version}"
            );
            assert_eq!(
                chunks
                    .iter()
                    .filter(|c| matches!(c, Chunk::File(_)))
                    .count(),
                3
            );
            let joined: Vec<u8> = chunks
                .iter()
                .flat_map(|c| match c {
                    Chunk::Bytes(b) => b.to_vec(),
                    Chunk::File(f) => f.read().unwrap().to_vec(),
                })
                .collect();
            let mut plain = BytesMut::new();
            plain.put_i32(0);
            let mut h = ResponseHeader::default();
            h.correlation_id = 9;
            h.encode(&mut plain, ApiKey::Fetch.response_header_version(version))
                .unwrap();
            ResponseKind::Fetch(real.clone())
                .encode(&mut plain, version)
                .unwrap();
            let len = (plain.len() - 4) as i32;
            plain[..4].copy_from_slice(&len.to_be_bytes());
            assert_eq!(joined, plain.to_vec(), "v{version}");
        }
    }

    /// What ApiVersions advertises, in order: (key, min, max) for every API Strata serves.
    /// Changing any range changes what clients negotiate, so it must be deliberate.
    #[test]
    fn the_advertised_api_versions_are_exactly_these() {
        let expected: &[(ApiKey, i16, i16)] = &[
            (ApiKey::Produce, 3, 13),
            (ApiKey::Fetch, 4, 18),
            (ApiKey::ListOffsets, 1, 11),
            (ApiKey::Metadata, 0, 13),
            (ApiKey::ApiVersions, 0, 5),
            (ApiKey::CreateTopics, 2, 7),
            (ApiKey::DeleteTopics, 1, 6),
            (ApiKey::DeleteRecords, 0, 2),
            (ApiKey::InitProducerId, 0, 5),
            (ApiKey::OffsetForLeaderEpoch, 2, 4),
            (ApiKey::DescribeConfigs, 1, 4),
            (ApiKey::AlterConfigs, 0, 2),
            (ApiKey::IncrementalAlterConfigs, 0, 1),
            (ApiKey::DescribeLogDirs, 1, 5),
            (ApiKey::AlterReplicaLogDirs, 1, 2),
            (ApiKey::CreatePartitions, 0, 3),
            (ApiKey::ElectLeaders, 0, 2),
            (ApiKey::DescribeCluster, 0, 2),
            (ApiKey::DescribeQuorum, 0, 2),
            (ApiKey::AddRaftVoter, 0, 1),
            (ApiKey::RemoveRaftVoter, 0, 0),
            (ApiKey::UpdateFeatures, 0, 2),
            (ApiKey::DescribeTopicPartitions, 0, 0),
            (ApiKey::FindCoordinator, 0, 6),
            (ApiKey::JoinGroup, 0, 9),
            (ApiKey::SyncGroup, 0, 5),
            (ApiKey::Heartbeat, 0, 4),
            (ApiKey::LeaveGroup, 0, 5),
            (ApiKey::OffsetCommit, 2, 10),
            (ApiKey::OffsetFetch, 1, 10),
            (ApiKey::DescribeGroups, 0, 6),
            (ApiKey::ListGroups, 0, 5),
            (ApiKey::DeleteGroups, 0, 3),
            (ApiKey::OffsetDelete, 0, 0),
            (ApiKey::ConsumerGroupHeartbeat, 0, 1),
            (ApiKey::ConsumerGroupDescribe, 0, 1),
            (ApiKey::AddPartitionsToTxn, 0, 5),
            (ApiKey::AddOffsetsToTxn, 0, 4),
            (ApiKey::EndTxn, 0, 5),
            (ApiKey::WriteTxnMarkers, 1, 2),
            (ApiKey::TxnOffsetCommit, 0, 6),
            (ApiKey::DescribeProducers, 0, 0),
            (ApiKey::DescribeTransactions, 0, 0),
            (ApiKey::ListTransactions, 0, 2),
            (ApiKey::SaslHandshake, 1, 1),
            (ApiKey::SaslAuthenticate, 0, 2),
            (ApiKey::DescribeUserScramCredentials, 0, 0),
            (ApiKey::AlterUserScramCredentials, 0, 0),
            (ApiKey::CreateDelegationToken, 1, 3),
            (ApiKey::RenewDelegationToken, 1, 2),
            (ApiKey::ExpireDelegationToken, 1, 2),
            (ApiKey::DescribeDelegationToken, 1, 3),
            (ApiKey::DescribeAcls, 1, 3),
            (ApiKey::CreateAcls, 1, 3),
            (ApiKey::DeleteAcls, 1, 3),
            (ApiKey::DescribeClientQuotas, 0, 1),
            (ApiKey::AlterClientQuotas, 0, 1),
            (ApiKey::AlterPartitionReassignments, 0, 1),
            (ApiKey::ListPartitionReassignments, 0, 0),
            (ApiKey::UnregisterBroker, 0, 0),
            (ApiKey::ListConfigResources, 0, 1),
            (ApiKey::ShareGroupHeartbeat, 1, 1),
            (ApiKey::ShareGroupDescribe, 1, 1),
            (ApiKey::ShareFetch, 1, 2),
            (ApiKey::ShareAcknowledge, 1, 2),
            (ApiKey::DescribeShareGroupOffsets, 0, 1),
            (ApiKey::AlterShareGroupOffsets, 0, 0),
            (ApiKey::DeleteShareGroupOffsets, 0, 0),
            (ApiKey::InitializeShareGroupState, 0, 0),
            (ApiKey::ReadShareGroupState, 0, 0),
            (ApiKey::WriteShareGroupState, 0, 1),
            (ApiKey::DeleteShareGroupState, 0, 0),
            (ApiKey::ReadShareGroupStateSummary, 0, 1),
        ];
        let advertised: Vec<(i16, i16, i16)> = API_TABLE
            .api_versions_list()
            .iter()
            .map(|v| (v.api_key, v.min_version, v.max_version))
            .collect();
        let expected_numbers: Vec<(i16, i16, i16)> = expected
            .iter()
            .map(|&(k, min, max)| (k as i16, min, max))
            .collect();
        assert_eq!(advertised, expected_numbers);
        // decode_request admits exactly these keys and ranges.
        for &(key, min, max) in expected {
            assert_eq!((API_TABLE.versions)(key), Some((min, max)), "{key:?}");
        }
        let served: Vec<ApiKey> = API_TABLE.keys.to_vec();
        let listed: Vec<ApiKey> = expected.iter().map(|&(k, _, _)| k).collect();
        assert_eq!(served, listed);
        for key in [ApiKey::Vote, ApiKey::BrokerRegistration] {
            assert_eq!((API_TABLE.versions)(key), None, "{key:?}");
        }
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let mut raw = vec![0u8, 3, 0, 12, 0, 0, 0, 1];
        raw.extend_from_slice(&[0xff; 7]);
        assert!(matches!(
            decode_request(Bytes::from(raw), &API_TABLE),
            Err(FrameError::Malformed { .. })
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 1]), &API_TABLE),
            Err(FrameError::TooShort(2))
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0x7f, 1, 0, 0, 0, 0, 0, 0]), &API_TABLE),
            Err(FrameError::UnknownApiKey(_))
        ));
    }
}
