//! Reloading the configuration (SIGHUP, `POST /reload`): the file is read again and the new
//! cluster swapped in; listeners and connection limits wait for a restart.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::Config;
use crate::state::cluster::Cluster;
use crate::state::switch::Switch;

impl Switch {
    /// Re-reads the configuration file and swaps the new cluster in. A bad file changes nothing.
    /// The file decides membership: nodes added through the admin API and not in the file
    /// leave, nodes removed through it come back (see `crate::control::membership`). Nodes of
    /// a `[[discovery]]` source the file still has stay (see `crate::control::discovery`).
    pub async fn reload(&self) -> Result<String, String> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let current = self.cluster.load_full();
        let Some(path) = current.config.source.clone() else {
            return Err("started without a configuration file; nothing to reload".into());
        };
        let loaded = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .map_err(|e| format!("reload failed: {e}"))?;
        let mut config = loaded.map_err(|e| e.to_string())?;
        crate::control::discovery::keep_discovered(self, &current, &mut config);
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        let mut note = String::new();
        if config.listen != current.config.listen
            || config.admin != current.config.admin
            || crate::frontend::listener::kinds_differ(&config, &current.config)
        {
            note = " (listener and connection-limit changes take effect on restart)".into();
        }
        let cluster = Cluster::build(
            config,
            current.generation + 1,
            Some(&current),
            self.epoch.now_nanos(),
        )
        .map_err(|e| e.to_string())?;
        let changed = crate::control::membership::difference(&current, &cluster);
        let summary = format!(
            "reloaded: generation {}, policy {}, {} nodes{changed}{note}",
            cluster.generation,
            cluster.config.policy.name(),
            cluster.nodes.len()
        );
        self.cluster.store(Arc::new(cluster));
        self.reloads.fetch_add(1, Ordering::Relaxed);
        tracing::info!("{summary}");
        Ok(summary)
    }
}
