//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them (KIP-84): the server
//! side of the exchange, and the credential derivation used by AlterUserScramCredentials and
//! `strata scram add`. Credentials are stored as salt, iterations, StoredKey and ServerKey;
//! the password is never stored.

use aws_lc_rs::{digest, hmac, pbkdf2};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub fn parse(name: &str) -> Option<Mechanism> {
        match name {
            "SCRAM-SHA-256" => Some(Mechanism::Sha256),
            "SCRAM-SHA-512" => Some(Mechanism::Sha512),
            _ => None,
        }
    }
    /// Kafka's ScramMechanism type code (DescribeUserScramCredentials).
    pub fn from_code(code: i8) -> Option<Mechanism> {
        match code {
            1 => Some(Mechanism::Sha256),
            2 => Some(Mechanism::Sha512),
            _ => None,
        }
    }
    pub fn code(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }
    fn hmac_alg(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }
    fn digest_alg(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        }
    }
    fn pbkdf2_alg(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
    fn len(self) -> usize {
        match self {
            Mechanism::Sha256 => 32,
            Mechanism::Sha512 => 64,
        }
    }
    /// Kafka's bounds on iterations.
    pub fn min_iterations(self) -> i32 {
        4096
    }
}

/// A stored SCRAM credential (base64 in the metadata file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub salt: String,
    pub stored_key: String,
    pub server_key: String,
    pub iterations: i32,
}

fn hmac(m: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    let k = hmac::Key::new(m.hmac_alg(), key);
    hmac::sign(&k, data).as_ref().to_vec()
}

/// SaltedPassword := Hi(password, salt, i).
pub fn salted_password(m: Mechanism, password: &[u8], salt: &[u8], iterations: i32) -> Vec<u8> {
    let mut out = vec![0u8; m.len()];
    let n =
        std::num::NonZeroU32::new(iterations.max(1) as u32).unwrap_or(std::num::NonZeroU32::MIN);
    pbkdf2::derive(m.pbkdf2_alg(), n, salt, password, &mut out);
    out
}

/// The credential stored for a salted password (AlterUserScramCredentials sends the salted
/// password, not the password).
pub fn credential_from_salted(
    m: Mechanism,
    salted: &[u8],
    salt: &[u8],
    iterations: i32,
) -> Credential {
    let client_key = hmac(m, salted, b"Client Key");
    let stored_key = digest::digest(m.digest_alg(), &client_key);
    let server_key = hmac(m, salted, b"Server Key");
    Credential {
        salt: B64.encode(salt),
        stored_key: B64.encode(stored_key.as_ref()),
        server_key: B64.encode(server_key),
        iterations,
    }
}

/// A credential for a password with a fresh random salt.
pub fn credential_for_password(m: Mechanism, password: &str, iterations: i32) -> Credential {
    let mut salt = [0u8; 24];
    let _ = aws_lc_rs::rand::fill(&mut salt);
    let salted = salted_password(m, password.as_bytes(), &salt, iterations);
    credential_from_salted(m, &salted, &salt, iterations)
}

/// What the server found for a client-first message: the credential to check the proof
/// against and the authorization id the client becomes (the user itself, or a delegation
/// token's owner).
#[derive(Debug, Clone)]
pub struct Found {
    pub credential: Credential,
    pub authorization_id: String,
    /// When the credential expires (a delegation token's expiry timestamp, epoch ms): the
    /// session lasts at most until then (KIP-368).
    pub expiry_timestamp_ms: Option<i64>,
}

/// The server side of one SCRAM exchange.
pub struct ServerExchange {
    mechanism: Mechanism,
    state: State,
}

enum State {
    Initial,
    SentFirst {
        user: String,
        token_authenticated: bool,
        expiry_timestamp_ms: Option<i64>,
        credential: Credential,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Done,
}

/// The outcome of one step.
pub enum Step {
    /// Send this and wait for the next client message.
    Continue(Vec<u8>),
    /// Authenticated as this user (a delegation token's owner when `token_authenticated`);
    /// send the final message.
    Success {
        user: String,
        token_authenticated: bool,
        /// See [`Found::expiry_timestamp_ms`].
        expiry_timestamp_ms: Option<i64>,
        reply: Vec<u8>,
    },
}

impl ServerExchange {
    pub fn new(mechanism: Mechanism) -> Self {
        ServerExchange {
            mechanism,
            state: State::Initial,
        }
    }

    /// Processes one client message. `lookup` finds the credential of a user name, or of a
    /// delegation token id when the second argument is set (the client sent the extension
    /// `tokenauth=true`, KIP-48). Errors are the message for SASL_AUTHENTICATION_FAILED.
    pub fn step(
        &mut self,
        msg: &[u8],
        lookup: impl Fn(&str, bool) -> Option<Found>,
    ) -> Result<Step, String> {
        let m = self.mechanism;
        let failed = || {
            format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                m.name()
            )
        };
        let text = std::str::from_utf8(msg).map_err(|_| "Invalid SCRAM message".to_string())?;
        match std::mem::replace(&mut self.state, State::Done) {
            State::Initial => {
                // client-first: gs2-header ("n,," or "n,a=authzid,") then bare "n=user,r=nonce".
                let mut parts = text.splitn(3, ',');
                let cbind = parts.next().unwrap_or("");
                let _authzid = parts.next().unwrap_or("");
                let bare = parts.next().ok_or("Invalid SCRAM client first message")?;
                if cbind != "n" && cbind != "y" {
                    return Err("SCRAM channel binding is not supported".into());
                }
                let mut user = None;
                let mut nonce = None;
                let mut token_authenticated = false;
                for attr in bare.split(',') {
                    if let Some(u) = attr.strip_prefix("n=") {
                        user = Some(u.replace("=2C", ",").replace("=3D", "="));
                    } else if let Some(r) = attr.strip_prefix("r=") {
                        nonce = Some(r.to_string());
                    } else if let Some(v) = attr.strip_prefix("tokenauth=") {
                        token_authenticated = v.eq_ignore_ascii_case("true");
                    }
                }
                let (Some(user), Some(client_nonce)) = (user, nonce) else {
                    return Err("Invalid SCRAM client first message".into());
                };
                let Found {
                    credential,
                    authorization_id,
                    expiry_timestamp_ms,
                } = lookup(&user, token_authenticated).ok_or_else(failed)?;
                let mut r = [0u8; 18];
                let _ = aws_lc_rs::rand::fill(&mut r);
                let nonce = format!("{client_nonce}{}", B64.encode(r));
                let server_first = format!(
                    "r={nonce},s={},i={}",
                    credential.salt, credential.iterations
                );
                let reply = server_first.clone().into_bytes();
                self.state = State::SentFirst {
                    user: authorization_id,
                    token_authenticated,
                    expiry_timestamp_ms,
                    credential,
                    client_first_bare: bare.to_string(),
                    server_first,
                    nonce,
                };
                Ok(Step::Continue(reply))
            }
            State::SentFirst {
                user,
                token_authenticated,
                expiry_timestamp_ms,
                credential,
                client_first_bare,
                server_first,
                nonce,
            } => {
                // client-final: "c=biws,r=<nonce>,p=<proof>"
                let (without_proof, proof) = text
                    .rsplit_once(",p=")
                    .ok_or("Invalid SCRAM client final message")?;
                let got_nonce = without_proof
                    .split(',')
                    .find_map(|a| a.strip_prefix("r="))
                    .ok_or("Invalid SCRAM client final message")?;
                if got_nonce != nonce {
                    return Err("Invalid SCRAM client final message: nonce mismatch".into());
                }
                let proof = B64.decode(proof).map_err(|_| failed())?;
                let stored_key = B64.decode(&credential.stored_key).map_err(|_| failed())?;
                let server_key = B64.decode(&credential.server_key).map_err(|_| failed())?;
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let client_signature = hmac(m, &stored_key, auth_message.as_bytes());
                if proof.len() != client_signature.len() {
                    return Err(failed());
                }
                let client_key: Vec<u8> = proof
                    .iter()
                    .zip(&client_signature)
                    .map(|(a, b)| a ^ b)
                    .collect();
                let computed = digest::digest(m.digest_alg(), &client_key);
                if aws_lc_rs::constant_time::verify_slices_are_equal(computed.as_ref(), &stored_key)
                    .is_err()
                {
                    return Err(failed());
                }
                let server_signature = hmac(m, &server_key, auth_message.as_bytes());
                Ok(Step::Success {
                    user,
                    token_authenticated,
                    expiry_timestamp_ms,
                    reply: format!("v={}", B64.encode(server_signature)).into_bytes(),
                })
            }
            State::Done => Err("SCRAM exchange already complete".into()),
        }
    }
}

/// The client side (tests and tools): returns (client-first, a closure for the final).
pub struct ClientExchange {
    mechanism: Mechanism,
    user: String,
    password: String,
    nonce: String,
    /// Client-first extensions (`,tokenauth=true` for a delegation token).
    extensions: String,
}

impl ClientExchange {
    pub fn new(mechanism: Mechanism, user: &str, password: &str) -> Self {
        let mut r = [0u8; 18];
        let _ = aws_lc_rs::rand::fill(&mut r);
        ClientExchange {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            nonce: B64.encode(r),
            extensions: String::new(),
        }
    }

    /// Authenticates with a delegation token: its id as user, its base64 HMAC as password.
    pub fn for_token(mechanism: Mechanism, token_id: &str, hmac_base64: &str) -> Self {
        ClientExchange {
            extensions: ",tokenauth=true".into(),
            ..ClientExchange::new(mechanism, token_id, hmac_base64)
        }
    }

    pub fn first(&self) -> Vec<u8> {
        format!("n,,n={},r={}{}", self.user, self.nonce, self.extensions).into_bytes()
    }
    /// The client-final message for the server-first message.
    pub fn last(&self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        self.finish(server_first).map(|(last, _)| last)
    }

    /// The client-final message for the server-first message, and the server-final message
    /// a server that knows the password answers (`v=ServerSignature`): the client checks it
    /// to authenticate the server in turn (RFC 5802 section 3).
    pub fn finish(&self, server_first: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
        let m = self.mechanism;
        let sf = std::str::from_utf8(server_first).map_err(|e| e.to_string())?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for a in sf.split(',') {
            if let Some(v) = a.strip_prefix("r=") {
                nonce = Some(v.to_string());
            } else if let Some(v) = a.strip_prefix("s=") {
                salt = B64.decode(v).ok();
            } else if let Some(v) = a.strip_prefix("i=") {
                iterations = v.parse::<i32>().ok();
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("bad server-first message {sf}"));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend the client's".into());
        }
        if iterations < m.min_iterations() {
            return Err(format!(
                "{iterations} iterations is below {}",
                m.min_iterations()
            ));
        }
        let salted = salted_password(m, self.password.as_bytes(), &salt, iterations);
        let client_key = hmac(m, &salted, b"Client Key");
        let stored_key = digest::digest(m.digest_alg(), &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!(
            "n={},r={}{},{sf},{without_proof}",
            self.user, self.nonce, self.extensions
        );
        let signature = hmac(m, stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(m, &salted, b"Server Key");
        let server_signature = hmac(m, &server_key, auth_message.as_bytes());
        Ok((
            format!("{without_proof},p={}", B64.encode(proof)).into_bytes(),
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_exchange_succeeds_and_a_wrong_password_fails() {
        for m in [Mechanism::Sha256, Mechanism::Sha512] {
            let cred = credential_for_password(m, "secret", 4096);
            for (password, ok) in [("secret", true), ("wrong", false)] {
                let client = ClientExchange::new(m, "alice", password);
                let mut server = ServerExchange::new(m);
                let lookup = |u: &str, token: bool| {
                    (u == "alice" && !token).then(|| Found {
                        credential: cred.clone(),
                        authorization_id: u.to_string(),
                        expiry_timestamp_ms: None,
                    })
                };
                let Step::Continue(first) = server.step(&client.first(), lookup).unwrap() else {
                    panic!("first step continues");
                };
                let last = client.last(&first).unwrap();
                match server.step(&last, lookup) {
                    Ok(Step::Success {
                        user,
                        token_authenticated,
                        reply,
                        ..
                    }) => {
                        assert!(ok);
                        assert_eq!(user, "alice");
                        assert!(!token_authenticated);
                        // The server proves it knows the credential too.
                        assert_eq!(reply, client.finish(&first).unwrap().1);
                    }
                    Err(e) => {
                        assert!(!ok);
                        assert!(e.contains("invalid credentials"), "{e}");
                    }
                    Ok(Step::Continue(_)) => panic!("no third step"),
                }
            }
            // Unknown users fail at the first step with the same message.
            let mut server = ServerExchange::new(m);
            let client = ClientExchange::new(m, "mallory", "x");
            assert!(server.step(&client.first(), |_, _| None).is_err());
        }
    }

    #[test]
    fn a_token_exchange_looks_up_the_token_and_authenticates_its_owner() {
        let m = Mechanism::Sha512;
        let cred = credential_for_password(m, "hmac-b64", 4096);
        let lookup = |u: &str, token: bool| {
            (u == "token-id" && token).then(|| Found {
                credential: cred.clone(),
                authorization_id: "alice".into(),
                expiry_timestamp_ms: Some(1_000),
            })
        };
        let client = ClientExchange::for_token(m, "token-id", "hmac-b64");
        let mut server = ServerExchange::new(m);
        let Step::Continue(first) = server.step(&client.first(), lookup).unwrap() else {
            panic!("first step continues");
        };
        let (last, want) = client.finish(&first).unwrap();
        let Ok(Step::Success {
            user,
            token_authenticated,
            expiry_timestamp_ms,
            reply,
        }) = server.step(&last, lookup)
        else {
            panic!("token authenticates");
        };
        assert_eq!((user.as_str(), token_authenticated), ("alice", true));
        assert_eq!(expiry_timestamp_ms, Some(1_000));
        assert_eq!(reply, want);
        // Without the extension the token id is an ordinary (unknown) user name.
        let plain = ClientExchange::new(m, "token-id", "hmac-b64");
        assert!(ServerExchange::new(m).step(&plain.first(), lookup).is_err());
    }

    #[test]
    fn rfc7677_test_vector() {
        // RFC 7677 section 3: user "user", password "pencil".
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(Mechanism::Sha256, b"pencil", &salt, 4096);
        let c = credential_from_salted(Mechanism::Sha256, &salted, &salt, 4096);
        let server_key = B64.decode(&c.server_key).unwrap();
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let sig = hmac(Mechanism::Sha256, &server_key, auth.as_bytes());
        assert_eq!(
            B64.encode(sig),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }
}
