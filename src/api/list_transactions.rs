//! ListTransactions: transactional ids filtered by state, producer id, how long they have
//! been open (v1+) and a regular expression over the id (v2+).

use std::sync::Arc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, RequestKind, ResponseKind, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::txn::TransactionCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub fn handle(
    txns: &Arc<TransactionCoordinator>,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let c = txns;
    let pattern = match req
        .transactional_id_pattern
        .as_ref()
        .filter(|p| !p.is_empty())
    {
        // Kafka matches the whole id (Java's `Matcher.matches`).
        Some(p) => match regex::Regex::new(&format!("^(?:{})$", p.as_str())) {
            Ok(r) => Some(r),
            Err(_) => {
                return ListTransactionsResponse::default()
                    .with_error_code(ResponseError::InvalidRegularExpression.code())
            }
        },
        None => None,
    };
    let states: Vec<String> = req.state_filters.iter().map(|s| s.to_string()).collect();
    let pids: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let (txns, unknown) = c.list(&states, &pids, req.duration_filter, pattern.as_ref());
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown.into_iter().map(StrBytes::from_string).collect())
        .with_transaction_states(
            txns.into_iter()
                .map(|t| {
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(StrBytes::from_string(
                            t.transactional_id,
                        )))
                        .with_producer_id(t.producer_id.into())
                        .with_transaction_state(StrBytes::from_static_str(t.state))
                })
                .collect(),
        )
}

/// ListTransactions: only the transactional ids the principal may describe.
pub struct ListTransactions;

impl Api for ListTransactions {
    type Request = ListTransactionsRequest;

    fn authorize(who: &Who, r: ListTransactionsRequest, _version: i16) -> Gate {
        let who = who.clone();
        Gate::Run(
            RequestKind::ListTransactions(r),
            gate::finish(move |resp| match resp {
                ResponseKind::ListTransactions(mut l) => {
                    l.transaction_states.retain(|t| {
                        who.may(Op::Describe, Res::TransactionalId, &t.transactional_id)
                    });
                    ResponseKind::ListTransactions(l)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: ListTransactionsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.txns, r))
    }
}
