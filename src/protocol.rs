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

/// The APIs Strata serves. Versions are the crate's ranges, which are Apache Kafka 4.1's.
pub const SUPPORTED_APIS: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::ApiVersions,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::DescribeConfigs,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::DescribeLogDirs,
    ApiKey::CreatePartitions,
    ApiKey::DescribeCluster,
];

/// (min, max) version Strata accepts for an API, if it serves it at all.
pub fn supported_versions(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS.contains(&key).then(|| {
        let r = key.valid_versions();
        (r.min, r.max)
    })
}

/// The `api_keys` list of an ApiVersions response.
pub fn api_versions_list() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .filter_map(|&k| {
            let (min, max) = supported_versions(k)?;
            let mut v = ApiVersion::default();
            v.api_key = k as i16;
            v.min_version = min;
            v.max_version = max;
            Some(v)
        })
        .collect()
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

/// Decodes one request frame (without the size prefix).
pub fn decode_request(mut frame: Bytes) -> Result<Request, FrameError> {
    let size = frame.len();
    let (key, version, correlation_id) = peek_header(&frame)?;
    let api_key = ApiKey::try_from(key).map_err(|_| FrameError::UnknownApiKey(key))?;
    match supported_versions(api_key) {
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

/// Encodes a response frame, size prefix included.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header.encode(&mut buf, api_key.response_header_version(version))?;
    body.encode(&mut buf, version)?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

/// Kafka's answer to an ApiVersions request at a version it does not know: a v0 response
/// (header v0) with UNSUPPORTED_VERSION and the full list, so the client can retry lower.
pub fn unsupported_api_versions_response(correlation_id: i32) -> BytesMut {
    let mut body = ApiVersionsResponse::default();
    body.error_code = ResponseError::UnsupportedVersion.code();
    body.api_keys = api_versions_list();
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
        let r =
            decode_request(frame_for(ApiKey::Metadata, 12, &MetadataRequest::default())).unwrap();
        assert_eq!(r.header.correlation_id, 42);
        assert!(matches!(r.body, RequestKind::Metadata(_)));
    }

    #[test]
    fn too_new_api_versions_is_reported_with_its_correlation_id() {
        let f = frame_for(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        let mut raw = f.to_vec();
        raw[2..4].copy_from_slice(&99i16.to_be_bytes());
        match decode_request(Bytes::from(raw)) {
            Err(FrameError::UnsupportedVersion {
                api: ApiKey::ApiVersions,
                version: 99,
                correlation_id: 42,
            }) => {}
            other => panic!("unexpected {:?}", other.err()),
        }
        let resp = unsupported_api_versions_response(42);
        let mut body = resp.freeze().slice(4..);
        assert_eq!(body.get_i32(), 42);
        let decoded = ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(decoded.error_code, 35);
        assert!(decoded
            .api_keys
            .iter()
            .any(|k| k.api_key == 18 && k.max_version == 4));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let mut raw = vec![0u8, 3, 0, 12, 0, 0, 0, 1];
        raw.extend_from_slice(&[0xff; 7]);
        assert!(matches!(
            decode_request(Bytes::from(raw)),
            Err(FrameError::Malformed { .. })
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 1])),
            Err(FrameError::TooShort(2))
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0x7f, 1, 0, 0, 0, 0, 0, 0])),
            Err(FrameError::UnknownApiKey(_))
        ));
    }
}
