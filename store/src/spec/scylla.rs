//! The `scylla:` spec form (see the parent module's docs), parsed into a
//! [`ScyllaConfig`].

use crate::scylla::{ScyllaConfig, ScyllaTarget, Serial};

use super::StoreSpec;

/// The part of a `scylla:` spec after the scheme (see the module docs).
pub(super) fn parse_scylla(rest: &str) -> Result<StoreSpec, String> {
    let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (hosts, keyspace) = match hosts.split_once('/') {
        Some((h, k)) => (h, k),
        None => (hosts, crate::scylla::DEFAULT_KEYSPACE),
    };
    if hosts.contains('@') {
        return Err(format!(
            "credentials are never written in a spec (it is shown and logged): user=NAME, and the \
             password in password_file=PATH or {}",
            crate::scylla::PASSWORD_ENV
        ));
    }
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            // `host`, `host:port`, `[v6]`, `[v6]:port`.
            let has_port = match h.rsplit_once(']') {
                Some((_, rest)) => rest.starts_with(':'),
                None => h.contains(':'),
            };
            if has_port {
                h.to_string()
            } else {
                format!("{h}:9042")
            }
        })
        .collect();
    if nodes.is_empty() {
        return Err("scylla: needs at least one contact point".into());
    }
    crate::scylla::validate_keyspace(keyspace).map_err(|e| e.to_string())?;
    let mut config = ScyllaConfig::new(nodes, keyspace);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))?;
        match (k, v) {
            ("dc", dc) if !dc.is_empty() => config.datacenter = Some(dc.to_string()),
            ("serial", "local") => config.serial = Serial::Local,
            ("serial", "global") => config.serial = Serial::Serial,
            ("user", user) if !user.is_empty() => config.user = Some(user.to_string()),
            ("tls_ca", path) if !path.is_empty() => config.tls_ca = Some(path.to_string()),
            ("password_file", path) if !path.is_empty() => config.password_file = Some(path.to_string()),
            ("scan_ms", ms) => match ms.parse::<u64>() {
                Ok(ms) if (100..=3_600_000).contains(&ms) => config.scan = std::time::Duration::from_millis(ms),
                _ => return Err("scan_ms is a whole number of milliseconds from 100 to 3600000".into()),
            },
            ("password", _) => {
                return Err(format!(
                    "a password is never written in a spec (it is shown and logged): set {}",
                    crate::scylla::PASSWORD_ENV
                ))
            }
            // The value is not repeated: it might be a secret under a mistyped name.
            _ => {
                return Err(format!(
                    "unknown or empty option {k} (dc, serial=local|global, user, password_file, tls_ca, scan_ms)"
                ))
            }
        }
    }
    Ok(StoreSpec::Scylla(ScyllaTarget::Cluster(config)))
}
