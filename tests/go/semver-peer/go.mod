module krm-fn-runner/semver-peer

go 1.21

require github.com/Masterminds/semver/v3 v3.5.0
