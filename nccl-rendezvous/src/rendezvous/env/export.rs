//! The launcher's side of the table: the variables that make
//! [`RendezvousConfig::from_vars`] read a given place back, in torchrun's
//! names (what torchrun, nccl-launch or a hand-written script sets).

use super::identity::NAMESPACE_VAR;
use super::sources::{LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, RANK, WORLD_SIZE};
use super::store::{AGENT_STORE_VAR, MASTER_ADDR_VAR, MASTER_PORT_VAR, STORE_VAR};
use crate::rendezvous::{RendezvousConfig, StoreSpec};

impl RendezvousConfig {
    /// The variables a launcher sets so that
    /// [`RendezvousConfig::from_vars`] in the started process reads this
    /// place back: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`
    /// and `GROUP_RANK` (the last two where known), the store
    /// (`MASTER_ADDR` and `MASTER_PORT`; `NCCL_RS_STORE=file:<dir>`; or
    /// torchrun's agent store), and `NCCL_RS_NAMESPACE` unless the
    /// namespace is the default `manual` and the store not a file store
    /// (which needs one: give the configuration a namespace of its run).
    ///
    /// The timeout and the secret are not among them: they pass through
    /// the launcher's own environment, and a secret never belongs on a
    /// command line.
    pub fn launch_vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            (RANK.torchrun_var(), self.rank.to_string()),
            (WORLD_SIZE.torchrun_var(), self.world_size.to_string()),
            (LOCAL_RANK.torchrun_var(), self.local_rank.to_string()),
        ];
        if let Some(local_world_size) = self.local_world_size {
            vars.push((
                LOCAL_WORLD_SIZE.torchrun_var(),
                local_world_size.to_string(),
            ));
        }
        if let Some(node_rank) = self.node_rank {
            vars.push((NODE_RANK.torchrun_var(), node_rank.to_string()));
        }
        match &self.store {
            StoreSpec::Tcp { addr, port } => {
                vars.push((MASTER_ADDR_VAR, addr.clone()));
                vars.push((MASTER_PORT_VAR, port.to_string()));
            }
            StoreSpec::File { dir } => {
                vars.push((STORE_VAR, format!("file:{}", dir.display())));
            }
            StoreSpec::TorchAgent { addr, port } => {
                vars.push((MASTER_ADDR_VAR, addr.clone()));
                vars.push((MASTER_PORT_VAR, port.to_string()));
                vars.push((AGENT_STORE_VAR, "True".to_owned()));
            }
        }
        if self.namespace != "manual" || matches!(self.store, StoreSpec::File { .. }) {
            vars.push((NAMESPACE_VAR, self.namespace.clone()));
        }
        vars
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(config: &RendezvousConfig) -> RendezvousConfig {
        let vars = config.launch_vars();
        RendezvousConfig::from_vars(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.clone())
        })
        .unwrap_or_else(|error| panic!("{vars:?} do not read back: {error}"))
    }

    #[test]
    fn a_place_reads_back_from_its_launch_variables() {
        let tcp = StoreSpec::Tcp {
            addr: "node0".into(),
            port: 29500,
        };
        let mut config = RendezvousConfig::new(5, 8, tcp).unwrap();
        config.local_rank = 1;
        config.local_world_size = Some(4);
        config.node_rank = Some(1);
        assert_eq!(read_back(&config), config);

        let mut alone = RendezvousConfig::new(
            0,
            1,
            StoreSpec::File {
                dir: "/shared/run".into(),
            },
        )
        .unwrap();
        // A file store needs a namespace where no launcher names the job:
        // even the default one is passed on.
        assert_eq!(read_back(&alone), alone);
        alone.namespace = "job-7".into();
        assert_eq!(read_back(&alone), alone);
        assert_eq!(
            alone.launch_vars(),
            vec![
                ("RANK", "0".to_owned()),
                ("WORLD_SIZE", "1".to_owned()),
                ("LOCAL_RANK", "0".to_owned()),
                ("NCCL_RS_STORE", "file:/shared/run".to_owned()),
                ("NCCL_RS_NAMESPACE", "job-7".to_owned()),
            ]
        );
    }
}
