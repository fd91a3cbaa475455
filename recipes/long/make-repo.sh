#!/bin/sh
# Generates the long-history test project (see make-repo.ts).   recipes/long/make-repo.sh [OUT]
here="$(cd "$(dirname "$0")" && pwd)"
exec node --import "$here/../../node_modules/tsx/dist/esm/index.mjs" "$here/make-repo.ts" "$@"
