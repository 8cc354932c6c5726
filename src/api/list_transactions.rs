//! ListTransactions: transactional ids filtered by state, producer id, how long they have
//! been open (v1+) and a regular expression over the id (v2+).

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::sync::Arc;

use crate::coordinator::txn::TransactionCoordinator;

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
