#!/usr/bin/env bash
# Install a CPU Vulkan driver (Mesa's lavapipe) for ManiSkill/SAPIEN, which renders and sets up
# its scenes through Vulkan even with sim_backend=cpu and no GPU.
#
# Debian 12 (bookworm) ships Mesa 22, whose lavapipe SAPIEN 3 cannot use; Mesa 25 from
# bookworm-backports works. The backports source is derived from the machine's own
# /etc/apt/sources.list.d/debian.sources (the URIs and Signed-By of the stanza whose Suites name
# bookworm), so no mirror is written into the repo. Other releases get Mesa from their own suites.
#
# Idempotent: does nothing when a Mesa >= 25 lavapipe is already installed, and adds the suite
# only once. Exits 0 with a message, changing nothing, when not root or without apt-get.
#   bash .ci/install_vulkan.sh
set -euo pipefail

PACKAGES=(mesa-vulkan-drivers libvulkan1)
MIN_MESA=25
DEB822=/etc/apt/sources.list.d/debian.sources
BACKPORTS_FILE=/etc/apt/sources.list.d/rlcore-backports.sources

say() { echo "install_vulkan: $*"; }

if [[ "${EUID:-$(id -u)}" != 0 ]]; then
    say "not root: skipped (install ${PACKAGES[*]} >= ${MIN_MESA} by hand for ManiSkill)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get: skipped (install a Vulkan driver, e.g. Mesa >= ${MIN_MESA} lavapipe)"
    exit 0
fi

installed_version() {  # the installed version of package $1, or nothing
    dpkg-query -W -f='${db:Status-Abbrev} ${Version}\n' "$1" 2>/dev/null |
        awk '$1 == "ii" { print $2 }'
}

have_driver() {
    local mesa
    mesa="$(installed_version mesa-vulkan-drivers)"
    [[ -n "$mesa" && -n "$(installed_version libvulkan1)" ]] &&
        dpkg --compare-versions "$mesa" ge "$MIN_MESA"
}

if have_driver; then
    say "mesa-vulkan-drivers $(installed_version mesa-vulkan-drivers) already installed"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"

if [[ "$codename" != bookworm ]]; then
    say "Debian '${codename:-unknown}': installing ${PACKAGES[*]} from its own suites"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"
    exit 0
fi

suite=bookworm-backports

# Any apt source, one-line or deb822, that already names the suite (ours or the machine's own).
suite_configured() {
    grep -rqsE "^[^#]*([[:space:]]|^Suites:)${suite}([[:space:]]|$)" \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources
}

# Prints the deb822 stanza for $suite, copied from the stanza of $DEB822 whose Suites name
# bookworm: the same Types, URIs, Components and Signed-By.
backports_stanza() {
    awk -v suite="$suite" '
        function flush() {
            if (is_bookworm && uris != "") {
                printf "Types: %s\nURIs: %s\nSuites: %s\nComponents: %s\n",
                    (types == "" ? "deb" : types), uris, suite,
                    (components == "" ? "main" : components)
                if (signed != "") printf "Signed-By: %s\n", signed
                done = 1
                exit
            }
            types = uris = components = signed = ""; is_bookworm = 0
        }
        /^[[:space:]]*#/ { next }
        /^[[:space:]]*$/ { flush(); next }
        {
            key = tolower($1); sub(/:$/, "", key)
            value = $0; sub(/^[^:]*:[[:space:]]*/, "", value)
            if (key == "types") types = value
            else if (key == "uris") uris = value
            else if (key == "components") components = value
            else if (key == "signed-by") signed = value
            else if (key == "suites") {
                n = split(value, names, /[[:space:]]+/)
                for (i = 1; i <= n; i++) if (names[i] == "bookworm") is_bookworm = 1
            }
        }
        END { if (!done) flush() }
    ' "$DEB822"
}

if suite_configured; then
    say "${suite} already in the apt sources"
else
    if [[ ! -r "$DEB822" ]]; then
        say "no ${DEB822} to derive ${suite} from: skipped (add ${suite} to apt by hand)"
        exit 0
    fi
    stanza="$(backports_stanza)"
    if [[ -z "$stanza" ]]; then
        say "no stanza with Suites: bookworm in ${DEB822}: skipped (add ${suite} by hand)"
        exit 0
    fi
    say "adding ${suite} as ${BACKPORTS_FILE}"
    printf '# Added by rlcore .ci/install_vulkan.sh (Mesa >= %s for ManiSkill).\n%s\n' \
        "$MIN_MESA" "$stanza" >"$BACKPORTS_FILE"
fi

install() {
    apt-get install -y -qq --no-install-recommends -t "$suite" "${PACKAGES[@]}"
}

# Refresh only the backports lists when the release's own lists are already here; fall back to
# a full update when they are missing or too old for the install to resolve.
if compgen -G "/var/lib/apt/lists/*_dists_bookworm_*Packages*" >/dev/null &&
    [[ -f "$BACKPORTS_FILE" ]]; then
    apt-get update -qq -o Dir::Etc::sourcelist="$BACKPORTS_FILE" \
        -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0
    install || { apt-get update -qq && install; }
else
    apt-get update -qq
    install
fi

if have_driver; then
    say "installed mesa-vulkan-drivers $(installed_version mesa-vulkan-drivers)"
else
    say "mesa-vulkan-drivers >= ${MIN_MESA} is still missing after the install" >&2
    exit 1
fi
