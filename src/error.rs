//! The top-level error `main` maps to exit codes. Module errors stay in their modules;
//! `runtime::report()` renders any of them on one line.

/// Everything that can stop `bootlet run` from starting or keep it from going on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Kubeconfig(#[from] crate::api::kubeconfig::KubeconfigError),
    #[error(transparent)]
    Files(#[from] crate::pki::files::FilesError),
    #[error(transparent)]
    Api(#[from] crate::api::Error),
    #[error(transparent)]
    Bootstrap(#[from] crate::identity::bootstrap::BootstrapError),
}
