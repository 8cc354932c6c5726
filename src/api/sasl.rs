//! SaslHandshake and SaslAuthenticate after authentication or on a listener without SASL.
//! The connection answers them itself while authenticating; a request that reaches here gets
//! ILLEGAL_SASL_STATE, as in Kafka.

use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};
use kafka_protocol::ResponseError;

use crate::api::{Api, Context, Outcome};
use crate::services::Services;

/// SaslHandshake.
pub struct SaslHandshake;

impl Api for SaslHandshake {
    type Request = SaslHandshakeRequest;

    // Kafka 4 removed SaslHandshake v0 (raw SASL tokens after the handshake, KIP-896).
    const VERSIONS: VersionRange = VersionRange { min: 1, max: 1 };

    async fn handle(
        _s: &Services,
        _ctx: &Context,
        _r: SaslHandshakeRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(
            SaslHandshakeResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
        )
    }
}

/// SaslAuthenticate.
pub struct SaslAuthenticate;

impl Api for SaslAuthenticate {
    type Request = SaslAuthenticateRequest;

    async fn handle(
        _s: &Services,
        _ctx: &Context,
        _r: SaslAuthenticateRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(
            SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(StrBytes::from_static_str(
                    "Unexpected SASL request: this listener does not use SASL or the connection is already authenticated",
                ))),
        )
    }
}
