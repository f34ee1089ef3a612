# Sourced by the A/B scripts (bundle_ab.sh, ops_ab.sh) once their options are read: unpacks
# bundles $A and $B (tools/gpu/make_bundle.sh) into AB_DIR[A] and AB_DIR[B]
# (/tmp/icecache-ab-A and -B), and puts B's libraries first on the library path. Uses ROOT and
# the caller's fail() (binaries.sh).
declare -A AB_DIR
for side in A B; do
  BUNDLE=${!side}
  source "$ROOT/tools/gpu/binaries.sh"
  AB_DIR[$side]=/tmp/icecache-ab-$side
  rm -rf "${AB_DIR[$side]}" && mkdir -p "${AB_DIR[$side]}" && cp -r "$DEST/." "${AB_DIR[$side]}/"
done
export LD_LIBRARY_PATH=${AB_DIR[B]}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
