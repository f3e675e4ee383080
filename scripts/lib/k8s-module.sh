# Shared by the scripts that build Kubernetes commands from the Go module
# proxy (scripts/build-test-apiserver.sh, scripts/build-kubectl.sh).
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod redirects every
# staging module to ./staging with replace directives), so a throw-away
# module requires it and pins each staging module to the matching v0.Y.Z
# release. Source this file, then call k8s_throwaway_module DIR.

k8s_version=v1.33.13
staging_version=v0.33.13

# The staging modules of Kubernetes 1.32-1.34, all under k8s.io/.
k8s_staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)

# The -ldflags that stamp the version into a Kubernetes command.
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=33"

# k8s_throwaway_module DIR: writes DIR/go.mod requiring k8s.io/kubernetes at
# $k8s_version with every staging module pinned.
k8s_throwaway_module() {
  mkdir -p "$1"
  {
    echo "module local/k8sbuild"
    echo
    echo "go 1.24.0"
    echo
    echo "godebug default=go1.24"
    echo
    echo "require k8s.io/kubernetes $k8s_version"
    echo
    local m
    for m in "${k8s_staging[@]}"; do echo "replace k8s.io/$m => k8s.io/$m $staging_version"; done
  } >"$1/go.mod"
}
