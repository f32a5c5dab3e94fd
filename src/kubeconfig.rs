//! kubeconfig (being written)
