//! Security: who a client is and what it may do, as Kafka decides it.
//!
//! - [`tls`]: TLS listeners and the principal of a client certificate;
//! - [`sasl`]: SASL (PLAIN, SCRAM-SHA-256/512) with Kafka's SaslHandshake / SaslAuthenticate
//!   exchange and re-authentication (KIP-368); [`scram`]: the SCRAM exchange and credentials;
//! - [`delegation_token`]: delegation tokens (KIP-48): their rules and the SCRAM credentials
//!   a client authenticates with as a token's owner;
//! - [`acl`]: ACLs and the authorizer (Kafka's StandardAuthorizer rules).
//!
//! Where the rest lives: the security settings are parsed with the other settings
//! (`config::security`); the ACLs, credentials and quotas a broker holds are part of its
//! catalog (`broker::security`, replaced from the quorum in cluster mode); each API checks its
//! ACLs next to its handler (`api::*::authorize`, shared rules in `api::gate`).

pub mod acl;
pub mod delegation_token;
pub mod sasl;
pub mod scram;
pub mod tls;

pub use sasl::{Sasl, SaslOutcome, ANONYMOUS};
