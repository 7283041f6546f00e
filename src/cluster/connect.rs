//! Reaching the cluster: the client configuration found as kubectl finds it, and a first call
//! that says whether the API server answers.

use std::time::Duration;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where to find the cluster: the usual inference (KUBECONFIG, ~/.kube/config, in-cluster)
/// unless a file or context is named.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterAccess {
    /// The kubeconfig file; else `$KUBECONFIG`, `~/.kube/config`, or the in-cluster account.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context; else the current one.
    pub context: Option<String>,
}

/// The client configuration, found as kubectl finds it: --kubeconfig, else $KUBECONFIG (a
/// list, merged), else ~/.kube/config, else the in-cluster service account. The files are read
/// here rather than by kube, whose errors repeat the path and the cause.
async fn config(args: &ClusterAccess) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let paths: Vec<std::path::PathBuf> = match (&args.kubeconfig, std::env::var_os("KUBECONFIG")) {
        (Some(path), _) => vec![path.clone()],
        (None, Some(list)) if !list.is_empty() => std::env::split_paths(&list).collect(),
        (None, _) => std::env::var_os("HOME")
            .map(|home| std::path::Path::new(&home).join(".kube/config"))
            .filter(|path| path.exists())
            .into_iter()
            .collect(),
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in &paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
        let kubeconfig = Kubeconfig::from_yaml(&text)
            .with_context(|| format!("the kubeconfig {} is not valid", path.display()))?;
        merged = Some(match merged {
            None => kubeconfig,
            Some(first) => first.merge(kubeconfig)?,
        });
    }
    match merged {
        Some(kubeconfig) => Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?),
        None if args.context.is_some() => {
            anyhow::bail!("--context needs a kubeconfig, and there is none ($KUBECONFIG is unset and ~/.kube/config does not exist)")
        }
        None => kube::Config::incluster().map_err(|error| {
            anyhow::anyhow!(
                "no kubeconfig ($KUBECONFIG is unset and ~/.kube/config does not exist) and not in a cluster ({error}); pass --kubeconfig FILE"
            )
        }),
    }
}

/// Connects and checks that the API server answers.
pub(crate) async fn connect(args: &ClusterAccess) -> anyhow::Result<kube::Client> {
    let config = config(args).await?;
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)?;
    tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))
        .and_then(|answer| answer.map_err(anyhow::Error::from))
        .with_context(|| format!("cannot reach the Kubernetes API server at {server}"))?;
    Ok(client)
}
