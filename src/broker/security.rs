//! The broker's ACLs, SCRAM credentials and client quotas: read by the request path, changed
//! by the admin APIs (locally on a single node, through the quorum in cluster mode) and
//! replaced by the cluster-mode sync.

use super::*;

/// The ACLs, credentials and quotas the quorum holds, decoded (cluster mode).
#[derive(Debug, Default)]
pub struct SecurityRecords {
    pub acls: Vec<crate::security::acl::AclBinding>,
    pub scram: ScramStore,
    pub quotas: Vec<crate::quota::QuotaRecord>,
    pub delegation_tokens: Vec<crate::security::delegation_token::TokenInfo>,
}

impl Broker {
    /// A user's SCRAM credential for `mechanism`.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::Mechanism,
    ) -> Option<crate::security::scram::Credential> {
        self.scram
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(user)
            .and_then(|m| m.get(mechanism.name()))
            .cloned()
    }

    /// (user, [(mechanism, iterations)]) for DescribeUserScramCredentials.
    pub fn scram_users(&self) -> Vec<(String, Vec<(crate::security::scram::Mechanism, i32)>)> {
        self.scram
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(u, m)| {
                (
                    u.clone(),
                    m.iter()
                        .filter_map(|(name, c)| {
                            crate::security::scram::Mechanism::parse(name)
                                .map(|m| (m, c.iterations))
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// Sets (Some) or deletes (None) credentials and persists them. Blocking.
    pub fn alter_scram(
        &self,
        changes: Vec<(
            String,
            crate::security::scram::Mechanism,
            Option<crate::security::scram::Credential>,
        )>,
    ) -> io::Result<()> {
        if let Some(q) = self.quorum() {
            return q.alter_scram(&changes);
        }
        {
            let mut store = self.scram.write().unwrap_or_else(|e| e.into_inner());
            for (user, m, cred) in changes {
                match cred {
                    Some(c) => {
                        store
                            .entry(user)
                            .or_default()
                            .insert(m.name().to_string(), c);
                    }
                    None => {
                        if let Some(per_user) = store.get_mut(&user) {
                            per_user.remove(m.name());
                            if per_user.is_empty() {
                                store.remove(&user);
                            }
                        }
                    }
                }
            }
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.save_metadata()
    }

    /// Cluster mode: replaces the ACLs, SCRAM credentials and client quotas with the quorum's
    /// and keeps a copy in the metadata file. Blocking.
    pub fn apply_security_records(&self, records: SecurityRecords) -> io::Result<()> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.authorizer.replace(records.acls);
        *self.scram.write().unwrap_or_else(|e| e.into_inner()) = records.scram;
        self.quotas.replace(&records.quotas);
        self.replace_delegation_tokens(records.delegation_tokens);
        self.save_metadata()
    }

    /// Credentials added offline that cluster mode has not proposed to the quorum yet.
    pub fn pending_scram(&self) -> ScramStore {
        self.scram_pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets the offline credentials once the quorum has them. Blocking.
    pub fn clear_pending_scram(&self) -> io::Result<()> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.scram_pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.save_metadata()
    }

    /// Adds ACLs and persists them; on failure nothing changes. Blocking.
    pub fn create_acls(&self, new: &[crate::security::acl::AclBinding]) -> io::Result<()> {
        if let Some(q) = self.quorum() {
            return q.create_acls(new);
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = self.authorizer.acls();
        self.authorizer.add(new);
        self.save_metadata()
            .inspect_err(|_| self.authorizer.replace(before))
    }

    /// Deletes the ACLs matching each filter and persists the rest; returns what each filter
    /// deleted. On failure nothing changes. Blocking.
    pub fn delete_acls(
        &self,
        filters: &[crate::security::acl::AclFilter],
    ) -> io::Result<Vec<Vec<crate::security::acl::AclBinding>>> {
        if let Some(q) = self.quorum() {
            let all = self.authorizer.acls();
            let removed: Vec<Vec<crate::security::acl::AclBinding>> = filters
                .iter()
                .map(|f| all.iter().filter(|a| f.matches(a)).cloned().collect())
                .collect();
            let gone: BTreeSet<&crate::security::acl::AclBinding> =
                removed.iter().flatten().collect();
            q.delete_acls(&gone.into_iter().collect::<Vec<_>>())?;
            return Ok(removed);
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = self.authorizer.acls();
        let (removed, _) = self.authorizer.remove(filters);
        self.save_metadata()
            .inspect_err(|_| self.authorizer.replace(before))?;
        Ok(removed)
    }

    /// Applies validated client quota changes and persists them. Blocking.
    pub fn alter_client_quotas(&self, changes: &[crate::quota::Change]) -> io::Result<()> {
        if let Some(q) = self.quorum() {
            let before = self.quotas.records();
            let after = self.quotas.preview(changes);
            let set: Vec<_> = after
                .iter()
                .filter(|r| !before.contains(r))
                .cloned()
                .collect();
            let removed: Vec<_> = before
                .iter()
                .filter(|r| !after.iter().any(|a| a.entity == r.entity))
                .cloned()
                .collect();
            return q.alter_client_quotas(&set, &removed);
        }
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.quotas.apply(changes) {
            self.save_metadata()?;
        }
        Ok(())
    }
}
