//! DescribeTransactions: the coordinator's state of each transactional id.

use std::sync::Arc;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{self, Gate, Who, TXN_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::txn::TransactionCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub fn handle(
    txns: &Arc<TransactionCoordinator>,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let base = TransactionState::default()
                .with_transactional_id(id.clone())
                .with_transaction_state(StrBytes::from_static_str(""))
                .with_transaction_timeout_ms(0)
                .with_transaction_start_time_ms(-1)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1);
            let c = txns;
            match c.describe(id.0.as_str()) {
                Err(e) => base.with_error_code(e.code()),
                Ok(d) => {
                    let mut topics: Vec<TopicData> = Vec::new();
                    for (t, p) in d.partitions {
                        match topics.iter_mut().find(|x| x.topic.0.as_str() == t) {
                            Some(x) => x.partitions.push(p),
                            None => topics.push(
                                TopicData::default()
                                    .with_topic(TopicName(StrBytes::from_string(t)))
                                    .with_partitions(vec![p]),
                            ),
                        }
                    }
                    base.with_transaction_state(StrBytes::from_static_str(d.state))
                        .with_transaction_timeout_ms(d.timeout_ms)
                        .with_transaction_start_time_ms(d.start_ms)
                        .with_producer_id(d.producer_id.into())
                        .with_producer_epoch(d.producer_epoch)
                        .with_topics(topics)
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// DescribeTransactions: DESCRIBE on each transactional id.
pub struct DescribeTransactions;

impl Api for DescribeTransactions {
    type Request = DescribeTransactionsRequest;

    fn authorize(who: &Who, r: DescribeTransactionsRequest, _version: i16) -> Gate {
        let who = who.clone();
        Gate::Run(
            RequestKind::DescribeTransactions(r),
            gate::finish(move |resp| match resp {
                ResponseKind::DescribeTransactions(mut d) => {
                    for t in d.transaction_states.iter_mut() {
                        if !who.may(Op::Describe, Res::TransactionalId, &t.transactional_id) {
                            *t = TransactionState::default()
                                .with_transactional_id(t.transactional_id.clone())
                                .with_error_code(TXN_DENIED.code());
                        }
                    }
                    ResponseKind::DescribeTransactions(d)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeTransactionsRequest,
        _version: i16,
    ) -> Outcome {
        Outcome::respond(handle(&s.txns, r))
    }
}
