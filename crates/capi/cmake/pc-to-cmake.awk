# Turn one installed pkg-config file into a CMake imported target carrying exactly what
# `pkg-config --cflags --libs` gives (not Libs.private: that is for --static).
# Used by crates/capi/install.sh; output goes into PREFIX/lib/cmake/Squall/SquallTargets.cmake.
#
#   awk -v target=Squall::pthread -v prefix=/opt/squall -f pc-to-cmake.awk squall-pthread.pc
#
# Cflags: -I -> INTERFACE_INCLUDE_DIRECTORIES, -D -> INTERFACE_COMPILE_DEFINITIONS,
#         "-include FILE" -> "SHELL:-include FILE", others -> INTERFACE_COMPILE_OPTIONS.
# Libs:   -L -> INTERFACE_LINK_DIRECTORIES, -lNAME -> INTERFACE_LINK_LIBRARIES,
#         others (-pthread, -Wl,...) -> INTERFACE_LINK_OPTIONS.
# Requires: squall -> Squall::squall, squall-X -> Squall::X (INTERFACE_LINK_LIBRARIES).
# Paths under `prefix` are written relative to ${_SQUALL_PREFIX}, which SquallConfig.cmake
# computes from its own location, so the installed tree may be moved.

function expand(s,    out, i, j, name) {
    out = ""
    while ((i = index(s, "${")) > 0) {
        j = index(substr(s, i), "}")
        if (j == 0) break
        name = substr(s, i + 2, j - 3)
        out = out substr(s, 1, i - 1) ((name in vars) ? vars[name] : "")
        s = substr(s, i + j)
    }
    return out s
}

# Literal (not regex) replacement of every `from` in `s` by `to`.
function replace_all(s, from, to,    out, i) {
    if (from == "") return s
    out = ""
    while ((i = index(s, from)) > 0) {
        out = out substr(s, 1, i - 1) to
        s = substr(s, i + length(from))
    }
    return out s
}

function rel(s) { return replace_all(s, prefix, "${_SQUALL_PREFIX}") }

function add(list, item) { return list == "" ? item : list ";" item }

function target_of(pkg) {
    if (pkg == "squall") return "Squall::squall"
    if (substr(pkg, 1, 7) == "squall-") return "Squall::" substr(pkg, 8)
    return ""
}

/^[ \t]*#/ { next }
/^[A-Za-z_][A-Za-z0-9_.]*[ \t]*=/ {
    n = index($0, "=")
    name = substr($0, 1, n - 1); gsub(/[ \t]/, "", name)
    vars[name] = expand(substr($0, n + 1))
    next
}
/^[A-Za-z.]+[ \t]*:/ {
    n = index($0, ":")
    key = substr($0, 1, n - 1); gsub(/[ \t]/, "", key)
    val = expand(substr($0, n + 1))
    sub(/^[ \t]+/, "", val); sub(/[ \t]+$/, "", val)
    field[key] = val
    next
}

END {
    if (target == "") { print "pc-to-cmake.awk: no target given" > "/dev/stderr"; exit 1 }
    inc = ""; defs = ""; copts = ""; ldirs = ""; libs = ""; lopts = ""
    nc = split(field["Cflags"], c, /[ \t]+/)
    for (k = 1; k <= nc; k++) {
        t = c[k]
        if (t == "") continue
        if (t == "-I" && k < nc) { inc = add(inc, rel(c[++k])); continue }
        if (substr(t, 1, 2) == "-I") { inc = add(inc, rel(substr(t, 3))); continue }
        if (substr(t, 1, 2) == "-D" && length(t) > 2) { defs = add(defs, substr(t, 3)); continue }
        if ((t == "-include" || t == "-isystem" || t == "-imacros") && k < nc) {
            copts = add(copts, "SHELL:" t " " rel(c[++k])); continue
        }
        copts = add(copts, rel(t))
    }
    # Requires first: a layer's link line follows the C API's, as pkg-config orders it.
    nr = split(field["Requires"], r, /[ \t,]+/)
    for (k = 1; k <= nr; k++) {
        t = r[k]
        if (t == "" || t ~ /^[<>=!]/ || t ~ /^[0-9]/) continue
        dep = target_of(t)
        if (dep == "") {
            print "pc-to-cmake.awk: " target " requires " t ", which is not a Squall package" > "/dev/stderr"
            exit 1
        }
        libs = add(libs, dep)
    }
    nl = split(field["Libs"], l, /[ \t]+/)
    for (k = 1; k <= nl; k++) {
        t = l[k]
        if (t == "") continue
        if (t == "-L" && k < nl) { ldirs = add(ldirs, rel(l[++k])); continue }
        if (substr(t, 1, 2) == "-L") { ldirs = add(ldirs, rel(substr(t, 3))); continue }
        if (substr(t, 1, 2) == "-l") { libs = add(libs, t); continue }
        lopts = add(lopts, rel(t))
    }
    print ""
    print "# " target ": " field["Description"]
    print "if(NOT TARGET " target ")"
    print "  add_library(" target " INTERFACE IMPORTED)"
    print "  set_target_properties(" target " PROPERTIES"
    if (inc != "") print "    INTERFACE_INCLUDE_DIRECTORIES \"" inc "\""
    if (defs != "") print "    INTERFACE_COMPILE_DEFINITIONS \"" defs "\""
    if (copts != "") print "    INTERFACE_COMPILE_OPTIONS \"" copts "\""
    if (ldirs != "") print "    INTERFACE_LINK_DIRECTORIES \"" ldirs "\""
    if (lopts != "") print "    INTERFACE_LINK_OPTIONS \"" lopts "\""
    if (libs != "") print "    INTERFACE_LINK_LIBRARIES \"" libs "\""
    print "  )"
    print "endif()"
}
