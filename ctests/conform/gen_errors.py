#!/usr/bin/env python3
"""Generates the invalid-argument matrix (MPI-4.0 chapter 9: with MPI_ERRORS_RETURN every
invalid argument comes back as an error class, through the handler of the object the program
passed, and the program can go on).

    python3 ctests/conform/gen_errors.py build/conform/errors.c
    mpicc -O1 -g -w -o errors errors.c -ldl

Input: src/platform/abi/mpi_functions.txt (the API table). Every function whose hook is not '-',
'rma-op', 'rma', 'init' or 'compat' (forwarded where the library has the function, so its
argument checks are the library's) is covered: the collectives ('coll'), the completion family
('request'), blocking and non-blocking point-to-point ('blocking', 'p2p')
and MPI_Pack/Unpack ('pack'). The prototypes are parsed; every parameter gets a role from
its C type and name (ROLE rules below), every role a baseline value (in the C runtime,
`base_values`) and a list of invalid values (VALUES below) with the error class MPI-4.0
§9.4 names for it. One case per (function, parameter, invalid value), plus:
  * aliased send/receive buffers (the send buffer is the receive buffer, or for
    (All)gather(v) this rank's own block in it, which is what MPICH compares: with the
    whole buffer only rank 0 sees the alias natively and the others wait for it) and
    run-time truncation of collectives, once as configured
    and once per non-native algorithm of the shim (forced with shim_set_algorithm when the
    shim is loaded; the algorithm lists are read from src/services/coll/select/mod.rs so the case
    list is the same with and without the shim: without it those cases run plainly);
  * a "[world-fatal]" variant of cases whose error is raised on a valid object: only the
    case's own communicator has MPI_ERRORS_RETURN, MPI_COMM_WORLD and MPI_COMM_SELF have
    MPI_ERRORS_ARE_FATAL (catches a shim that raises on another communicator: the job
    dies). These run after all other cases (ids FATAL_BASE + id), so a death among them
    hides nothing; at the default level one per (function, error class, algorithm), all
    of them with CONFORM_LEVEL=full.

Environment: the harness's (CONFORM_FROM, CONFORM_ONLY, CONFORM_LEVEL, CONFORM_SKIP,
CONFORM_PROGRESS; see harness.h).

Case ids: 100 * (1-based index of the function among the covered ones, in table order)
+ the case's index within the function (parameters in prototype order, values in VALUES
order, then the extra cases). Every case uses a fresh communicator (a dup of
MPI_COMM_WORLD, a periodic 1-D Cartesian communicator for neighbourhood collectives) with
MPI_ERRORS_RETURN; MPI_COMM_WORLD and MPI_COMM_SELF have MPI_ERRORS_RETURN too (errors on
an invalid communicator are raised there), except in the world-fatal variants.

Per case: the call; for non-blocking / persistent calls that returned MPI_SUCCESS the
completion (MPI_Wait; MPI_Start + MPI_Wait + MPI_Request_free), whose class is reported
instead; arguments significant at the root only (or only at non-roots) are erroneous at
those ranks only, so the ranks that got an error repeat the call with valid arguments
(the others may be waiting for them); then the class is reported (RC: the error class the
ranks that saw an error agree on; FAIL if they disagree, or, for an argument significant
everywhere, if some ranks returned MPI_SUCCESS), and the program goes on: one valid
MPI_Allreduce on the case's valid communicator, checked.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TABLE = os.path.join(ROOT, "src", "platform", "abi", "mpi_functions.txt")
SELECT = os.path.join(ROOT, "src", "services", "coll", "select", "mod.rs")
HARNESS = os.path.join(HERE, "harness.h")

FATAL_BASE = 50000
SKIP_HOOKS = {"-", "rma-op", "rma", "init", "compat"}

# ---------------------------------------------------------------------------------------
# The API table


def parse_table(path):
    funcs = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"(\S+)\s+(\S+)\s+(\S+)\s+(.*?)\s*\b(MPI_\w+)\s*\((.*)\)\s*$", line)
        if not m:
            raise SystemExit("cannot parse: " + line)
        cat, hook, world, ret, name, params = m.groups()
        if hook in SKIP_HOOKS:
            continue
        ps = []
        for p in params.split(","):
            p = p.strip()
            if p in ("", "void"):
                continue
            arr = p.endswith("[]")
            if arr:
                p = p[:-2].strip()
            mm = re.match(r"(.*?)(\w+)$", p)
            ctype = re.sub(r"\s+", " ", mm.group(1).replace("*", " * ")).strip()
            ctype = ctype.replace(" *", "*")
            ps.append((ctype, mm.group(2), arr))
        funcs.append(dict(cat=cat, hook=hook, ret=ret.strip(), name=name, params=ps))
    return funcs


def parse_algorithms(path):
    """{MPI collective name: [non-native algorithm names]} from the shim's registry."""
    try:
        src = open(path).read()
    except OSError:
        return {}
    names = dict(re.findall(r'Algo::(\w+)\s*=>\s*"([\w-]+)"', src))
    consts = {}
    for cname, body in re.findall(r"const (\w+_ALGOS): &\[Algo\] = &\[(.*?)\];", src, re.S):
        consts[cname] = [names[a] for a in re.findall(r"Algo::(\w+)", body)]
    out = {}
    for mpi, cname in re.findall(
        r'spec\(\s*Coll::\w+,\s*"\w+",\s*"(MPI_\w+)",\s*(\w+_ALGOS)', src
    ):
        out[mpi] = [a for a in consts.get(cname, []) if a not in ("native", "auto")]
    return out


# ---------------------------------------------------------------------------------------
# Families and forms

COLL_BASES = [
    "allgather", "allgatherv", "allreduce", "alltoall", "alltoallv", "alltoallw", "barrier",
    "bcast", "exscan", "gather", "gatherv", "reduce", "reduce_scatter",
    "reduce_scatter_block", "scan", "scatter", "scatterv", "neighbor_allgather",
    "neighbor_allgatherv", "neighbor_alltoall", "neighbor_alltoallv", "neighbor_alltoallw",
]
P2P_BASES = {
    "send": "FAM_SEND", "bsend": "FAM_SEND", "ssend": "FAM_SEND", "rsend": "FAM_SEND",
    "recv": "FAM_RECV", "sendrecv": "FAM_SENDRECV", "sendrecv_replace": "FAM_SRREPL",
    "probe": "FAM_PROBE", "mprobe": "FAM_PROBE", "mrecv": "FAM_MRECV",
}
PACK_FAMS = {
    "pack": "FAM_PACK", "unpack": "FAM_UNPACK", "pack_external": "FAM_PACKEXT",
    "unpack_external": "FAM_UNPACKEXT", "pack_external_size": "FAM_PACKSIZE",
}
REQ_BASES = [
    "wait", "test", "request_get_status", "start", "startall", "request_free", "cancel",
    "waitall", "testall", "waitany", "testany", "waitsome", "testsome",
]
# Collectives whose messages can truncate at run time (a valid call on each rank alone).
TRUNC_COLLS = {
    "bcast", "gather", "gatherv", "scatter", "scatterv", "allgather", "allgatherv",
    "alltoall", "alltoallv", "neighbor_allgather", "neighbor_alltoall",
}


def classify(f):
    """Adds fam, base, form, large, coll (MPI name for shim_set_algorithm) to f."""
    n = f["name"][4:]
    large = n.endswith("_c")
    if large:
        n = n[:-2]
    persist = n.endswith("_init")
    if persist:
        n = n[:-5]
    low = n.lower()
    nb = False
    if f["hook"] == "coll":
        if low not in COLL_BASES and low.startswith("i") and low[1:] in COLL_BASES:
            low, nb = low[1:], True
        if low not in COLL_BASES:
            raise SystemExit("unknown collective " + f["name"])
        fam = "FAM_COLL"
    elif f["hook"] == "request":
        if low not in REQ_BASES:
            raise SystemExit("unknown request function " + f["name"])
        fam = "FAM_REQ"
    elif f["hook"] not in ("pack", "p2p", "blocking"):
        # other hand-written hooks ('lifetime', 'errors', ...): handles and error
        # handlers, roles from the parameter types alone
        fam = "FAM_HANDLE"
    elif low in PACK_FAMS:
        fam = PACK_FAMS[low]
    else:
        if low not in P2P_BASES and low.startswith("i") and low[1:] in P2P_BASES:
            low, nb = low[1:], True
        if low not in P2P_BASES:
            raise SystemExit("unknown point-to-point function " + f["name"])
        fam = P2P_BASES[low]
    f.update(
        fam=fam, base=low, large=large,
        form="FORM_PERSIST" if persist else ("FORM_NB" if nb else "FORM_BLOCK"),
        coll=("MPI_" + low[0].upper() + low[1:]) if fam == "FAM_COLL" else None,
    )
    return f


# ---------------------------------------------------------------------------------------
# Roles: (family, C type, parameter name) -> role, and the C expression passing it.

def role_of(f, ctype, pname, arr):
    fam, base = f["fam"], f["base"]
    t = ctype.replace("const ", "")
    if fam == "FAM_HANDLE":
        return {
            ("MPI_Comm*", "comm"): "R_COMMP",
            ("MPI_Datatype*", "datatype"): "R_TYPEP",
            ("MPI_Op*", "op"): "R_OPP",
            ("MPI_Comm", "comm"): "R_COMM",
            ("MPI_Errhandler", "errhandler"): "R_ERRH",
            ("MPI_Errhandler*", "errhandler"): "R_ERRHP",
            ("int", "errorcode"): "R_ERRCODE",
        }[(t, pname)]
    if fam == "FAM_REQ":
        return {
            ("MPI_Request*", "request"): "R_REQP",
            ("MPI_Request", "request"): "R_REQ",
            ("int", "count"): "R_NREQ",
            ("int", "incount"): "R_NREQ",
            ("MPI_Request", "array_of_requests"): "R_REQS",
            ("int*", "flag"): "R_FLAG",
            ("MPI_Status*", "status"): "R_STATUS",
            ("MPI_Status", "array_of_statuses"): "R_STATUSES",
            ("int*", "indx"): "R_INDX",
            ("int*", "outcount"): "R_OUTCOUNT",
            ("int", "array_of_indices"): "R_INDICES",
        }[(t, pname)]
    if t == "MPI_Comm":
        return "R_COMM"
    if t == "MPI_Info":
        return "R_INFO"
    if t == "MPI_Op":
        return "R_OP"
    if t == "MPI_Request*":
        return "R_REQP"
    if t == "MPI_Status*":
        return "R_STATUS"
    if t == "MPI_Message*":
        return "R_MSG"
    if pname == "root":
        return "R_ROOT"
    if t == "MPI_Datatype":
        if arr:
            return {"sendtypes": "R_STYPES", "recvtypes": "R_RTYPES"}[pname]
        return {"sendtype": "R_STYPE", "recvtype": "R_RTYPE", "datatype": "R_DTYPE"}[pname]
    if t == "void*":
        if pname in ("sendbuf", "inbuf") or (pname == "buf" and ctype.startswith("const")):
            return "R_SBUF"
        return "R_RBUF"  # recvbuf, buffer (bcast), buf of receives, outbuf
    if t == "char*" or t == "char":
        return "R_DATAREP"
    if arr:
        if pname == "sendcounts":
            return "R_SCOUNTS"
        if pname == "recvcounts":
            return "R_RCOUNTS"
        if pname == "sdispls":
            return "R_SDISPLS"
        if pname == "rdispls":
            return "R_RDISPLS"
        if pname == "displs":
            return "R_SDISPLS" if base.startswith("scatter") else "R_RDISPLS"
    if pname == "position":
        return "R_POS"
    if pname == "size" and t.endswith("*"):
        return "R_SIZEP"
    if pname in ("outsize", "insize"):
        return "R_PSIZE"
    if pname == "sendcount":
        return "R_SCOUNT"
    if pname == "recvcount":
        return "R_RCOUNT"
    if pname in ("count", "incount", "outcount"):
        return "R_COUNT"
    if pname == "dest":
        return "R_DEST"
    if pname == "source":
        return "R_SOURCE"
    if pname == "sendtag":
        return "R_STAG"
    if pname == "recvtag":
        return "R_RTAG"
    if pname == "tag":
        return "R_STAG" if fam == "FAM_SEND" else "R_RTAG"
    raise SystemExit("no role for %s %s in %s" % (ctype, pname, f["name"]))


def c_arg(role, ctype, arr):
    t = ctype.replace("const ", "")
    scalar_count = {"R_SCOUNT": "X.scount", "R_RCOUNT": "X.rcount", "R_COUNT": "X.count",
                    "R_PSIZE": "X.psize"}
    if role in scalar_count:
        return "(%s)%s" % (t, scalar_count[role])
    if role in ("R_SCOUNTS", "R_RCOUNTS"):
        return "X.%scounts_%s" % (role[2].lower(), "c" if "MPI_Count" in t else "i")
    if role in ("R_SDISPLS", "R_RDISPLS"):
        return "X.%sdispls_%s" % (role[2].lower(), "a" if "MPI_Aint" in t else "i")
    if role == "R_POS":
        return {"int*": "X.posp_i", "MPI_Aint*": "X.posp_a", "MPI_Count*": "X.posp_c"}[t]
    if role == "R_SIZEP":
        return {"MPI_Aint*": "X.sizep_a", "MPI_Count*": "X.sizep_c"}[t]
    if role == "R_STATUS":
        return "X.statusp"
    if role == "R_STATUSES":
        return "X.statuses"
    return {
        "R_SBUF": "X.sbuf", "R_RBUF": "X.rbuf", "R_STYPE": "X.stype", "R_RTYPE": "X.rtype",
        "R_DTYPE": "X.dtype", "R_STYPES": "X.stypes", "R_RTYPES": "X.rtypes", "R_OP": "X.op",
        "R_ROOT": "X.root", "R_COMM": "X.comm", "R_INFO": "X.info", "R_REQP": "X.reqp",
        "R_REQ": "X.req", "R_DEST": "X.dest", "R_SOURCE": "X.source", "R_STAG": "X.stag",
        "R_RTAG": "X.rtag", "R_MSG": "X.msgp", "R_DATAREP": "X.datarep",
        "R_NREQ": "X.nreq", "R_REQS": "X.reqs", "R_FLAG": "X.flagp", "R_INDX": "X.indxp",
        "R_OUTCOUNT": "X.outcountp", "R_INDICES": "X.indices", "R_COMMP": "X.commp",
        "R_TYPEP": "X.typep", "R_OPP": "X.opp", "R_ERRH": "X.errh", "R_ERRHP": "X.errhp",
        "R_ERRCODE": "X.errcode",
    }[role]


# ---------------------------------------------------------------------------------------
# Invalid values: role -> [(label, value code, error class)], refined per function below.

TYPE_BAD = [("null", "V_NULLH", "MPI_ERR_TYPE"), ("garbage", "V_GARBAGE", "MPI_ERR_TYPE"),
            ("uncommitted", "V_UNCOMMITTED", "MPI_ERR_TYPE"),
            ("freed", "V_STALE", "MPI_ERR_TYPE")]
COMM_BAD = [("null", "V_NULLH", "MPI_ERR_COMM"), ("garbage", "V_GARBAGE", "MPI_ERR_COMM"),
            ("freed", "V_STALE", "MPI_ERR_COMM")]
VALUES = {
    "R_SBUF": [("NULL", "V_NULLPTR", "MPI_ERR_BUFFER")],
    "R_RBUF": [("NULL", "V_NULLPTR", "MPI_ERR_BUFFER")],
    "R_SCOUNT": [("-1", "V_NEG", "MPI_ERR_COUNT")],
    "R_RCOUNT": [("-1", "V_NEG", "MPI_ERR_COUNT")],
    "R_COUNT": [("-1", "V_NEG", "MPI_ERR_COUNT")],
    "R_STYPE": TYPE_BAD, "R_RTYPE": TYPE_BAD, "R_DTYPE": TYPE_BAD,
    "R_SCOUNTS": [("negative-entry", "V_NEG", "MPI_ERR_COUNT"),
                  ("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_RCOUNTS": [("negative-entry", "V_NEG", "MPI_ERR_COUNT"),
                  ("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_SDISPLS": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_RDISPLS": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_STYPES": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")]
    + [("entry-" + l, v, c) for l, v, c in TYPE_BAD],
    "R_RTYPES": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")]
    + [("entry-" + l, v, c) for l, v, c in TYPE_BAD],
    "R_OP": [("null", "V_NULLH", "MPI_ERR_OP"), ("garbage", "V_GARBAGE", "MPI_ERR_OP"),
             ("freed", "V_STALE", "MPI_ERR_OP"),
             ("MPI_BAND-on-MPI_DOUBLE", "V_BAND_DOUBLE", "MPI_ERR_OP"),
             ("MPI_MINLOC-on-MPI_INT", "V_MINLOC_INT", "MPI_ERR_OP")],
    "R_ROOT": [("-1", "V_ROOTNEG", "MPI_ERR_ROOT"), ("size", "V_ROOTSIZE", "MPI_ERR_ROOT")],
    "R_COMM": COMM_BAD,
    "R_INFO": [("garbage", "V_GARBAGE", "MPI_ERR_INFO")],
    "R_REQP": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_DEST": [("size", "V_RANK_SIZE", "MPI_ERR_RANK"), ("-7", "V_RANK_NEG", "MPI_ERR_RANK")],
    "R_SOURCE": [("size", "V_RANK_SIZE", "MPI_ERR_RANK"),
                 ("-7", "V_RANK_NEG", "MPI_ERR_RANK")],
    "R_STAG": [("-5", "V_TAG_NEG", "MPI_ERR_TAG"), ("TAG_UB+1", "V_TAG_UB", "MPI_ERR_TAG"),
               ("MPI_ANY_TAG", "V_TAG_ANY", "MPI_ERR_TAG")],
    "R_RTAG": [("-5", "V_TAG_NEG", "MPI_ERR_TAG"), ("TAG_UB+1", "V_TAG_UB", "MPI_ERR_TAG")],
    "R_MSG": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_POS": [("NULL", "V_NULLPTR", "MPI_ERR_ARG"), ("-1", "V_NEG", "MPI_ERR_ARG")],
    "R_PSIZE": [("too-small", "V_SMALL", "MPI_ERR_TRUNCATE"), ("-1", "V_NEG", "MPI_ERR_ARG")],
    "R_DATAREP": [("bogus", "V_BOGUS", "MPI_ERR_ARG")],
    "R_SIZEP": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_STATUS": [],
    # request family
    "R_REQ": [("garbage", "V_GARBAGE", "MPI_ERR_REQUEST"),
              ("freed", "V_STALE", "MPI_ERR_REQUEST")],
    "R_NREQ": [("-1", "V_NEG", "MPI_ERR_COUNT")],
    "R_REQS": [("NULL", "V_NULLPTR", "MPI_ERR_ARG"),
               ("garbage-entry", "V_GARBAGE", "MPI_ERR_REQUEST"),
               ("freed-entry", "V_STALE", "MPI_ERR_REQUEST")],
    "R_FLAG": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_INDX": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_OUTCOUNT": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_INDICES": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_STATUSES": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    # handles: free, error handlers
    "R_COMMP": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")] + COMM_BAD,
    "R_TYPEP": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")] + TYPE_BAD[:2] + TYPE_BAD[3:]
    + [("predefined", "V_PREDEF", "MPI_ERR_TYPE")],
    "R_OPP": [("NULL", "V_NULLPTR", "MPI_ERR_ARG"), ("null", "V_NULLH", "MPI_ERR_OP"),
              ("garbage", "V_GARBAGE", "MPI_ERR_OP"), ("freed", "V_STALE", "MPI_ERR_OP"),
              ("predefined", "V_PREDEF", "MPI_ERR_OP")],
    "R_ERRH": [("null", "V_NULLH", "MPI_ERR_ARG"), ("garbage", "V_GARBAGE", "MPI_ERR_ARG")],
    "R_ERRHP": [("NULL", "V_NULLPTR", "MPI_ERR_ARG")],
    "R_ERRCODE": [],
}

# Case flags (C): F_ASYM: significant at some ranks only (others may return MPI_SUCCESS);
# F_REDO: the ranks that got an error repeat the call with valid arguments; F_NEED2: with
# one process the value is valid (MPI_SUCCESS expected); F_OBJ: the error is raised on a
# valid object (gets a world-fatal variant).

ROOT_SIDE = {  # rooted collectives: roles significant at the root only
    "gather": {"R_RBUF", "R_RCOUNT", "R_RCOUNTS", "R_RDISPLS", "R_RTYPE"},
    "gatherv": {"R_RBUF", "R_RCOUNT", "R_RCOUNTS", "R_RDISPLS", "R_RTYPE"},
    "scatter": {"R_SBUF", "R_SCOUNT", "R_SCOUNTS", "R_SDISPLS", "R_STYPE"},
    "scatterv": {"R_SBUF", "R_SCOUNT", "R_SCOUNTS", "R_SDISPLS", "R_STYPE"},
    "reduce": {"R_RBUF"},
}


def values_for(f, role):
    """[(label, value, class, flags, algorithms)] for one parameter."""
    fam, base = f["fam"], f["base"]
    names = [p[1] for p in f["params"]]
    algs = ALGS.get(f["coll"], []) if f["coll"] else []
    out = []
    for label, val, cls in VALUES[role]:
        flags = []
        if fam == "FAM_COLL" and role in ROOT_SIDE.get(base, ()):
            flags += ["F_ASYM", "F_REDO"]
        out.append([label, val, cls, flags, [None]])
    if fam == "FAM_COLL":
        neigh = base.startswith("neighbor")
        if role == "R_COMM" and neigh:
            out.append(["no-topology", "V_NOTOPO", "MPI_ERR_TOPOLOGY", [], [None]])
        if role == "R_SBUF":
            if neigh:
                out.append(["MPI_IN_PLACE", "V_INPLACE", "MPI_ERR_BUFFER", [], [None]])
            if base in ("gather", "gatherv", "reduce"):
                # MPI_IN_PLACE is the root's option only: erroneous at the other ranks.
                out.append(["MPI_IN_PLACE", "V_INPLACE", "MPI_ERR_BUFFER",
                            ["F_ASYM", "F_REDO", "F_NEED2"], [None]])
        if role == "R_RBUF":
            fl = []
            if base in ("gather", "gatherv", "reduce"):
                fl = ["F_ASYM", "F_REDO"]
            if base in ("scatter", "scatterv"):  # the root may receive in place
                fl = ["F_ASYM", "F_REDO", "F_NEED2"]
            out.append(["MPI_IN_PLACE", "V_INPLACE", "MPI_ERR_BUFFER", fl, [None]])
            if "sendbuf" in names:
                fl = ["F_ASYM", "F_REDO"] if base in ROOT_SIDE else []
                out.append(["sendbuf(aliased)", "V_ALIAS", "MPI_ERR_BUFFER", fl,
                            [None] + algs])
    if fam == "FAM_SENDRECV" and role == "R_RBUF":
        out.append(["sendbuf(aliased)", "V_ALIAS", "MPI_ERR_BUFFER", [], [None]])
    if fam == "FAM_MRECV" and role == "R_MSG":
        out.append(["MPI_MESSAGE_NULL", "V_MSGNULL", "MPI_ERR_REQUEST", [], [None]])
    if fam == "FAM_REQ":
        if role == "R_REQP":
            out += [["garbage", "V_GARBAGE", "MPI_ERR_REQUEST", [], [None]],
                    ["freed", "V_STALE", "MPI_ERR_REQUEST", [], [None]]]
            if base in ("wait", "test"):
                out.append(["truncated-receive", "V_TRUNC", "MPI_ERR_TRUNCATE",
                            ["F_OBJ"], [None]])
            if base == "start":
                # no communicator argument: the error is about the handle, raised where
                # errors without an object go (the system MPI: MPI_COMM_WORLD)
                out.append(["non-persistent", "V_NONPERSIST", "MPI_ERR_REQUEST", [], [None]])
            if base in ("request_free", "cancel"):
                # about the handle, like a non-persistent request to MPI_Start: the system
                # MPI raises it on MPI_COMM_WORLD when the collective is its own
                out.append(["active-Iallreduce", "V_ACTIVECOLL", "MPI_ERR_REQUEST", [],
                            [None]])
        if role == "R_REQS":
            if base == "startall":
                out.append(["non-persistent-entry", "V_NONPERSIST", "MPI_ERR_REQUEST", [],
                            [None]])
            elif base.startswith(("wait", "test")):
                # Waitany/Testany complete one request, whose communicator the error is
                # raised on; the others report MPI_ERR_IN_STATUS for several requests, which
                # the system MPI raises on MPI_COMM_WORLD (no one communicator applies)
                one = base.endswith("any")
                cls = "MPI_ERR_TRUNCATE" if one else "MPI_ERR_IN_STATUS"
                out.append(["truncated-receive-entry", "V_TRUNC", cls,
                            ["F_OBJ"] if one else [], [None]])
    return out


def extra_cases(f):
    """Cases not tied to one parameter: run-time truncation."""
    fam, base = f["fam"], f["base"]
    out = []
    if fam == "FAM_COLL" and base in TRUNC_COLLS:
        flags = ["F_ASYM"] + (["F_NEED2"] if base == "bcast" else [])
        algs = ALGS.get(f["coll"], [])
        out.append(["(run-time)", "truncated", "V_TRUNC", "MPI_ERR_TRUNCATE", flags,
                    [None] + algs])
    if fam in ("FAM_RECV", "FAM_SENDRECV", "FAM_MRECV"):
        out.append(["(run-time)", "truncated", "V_TRUNC", "MPI_ERR_TRUNCATE", [], [None]])
    return out


# ---------------------------------------------------------------------------------------

ALGS = {}


def generate(out_path):
    global ALGS
    ALGS = parse_algorithms(SELECT)
    funcs = [classify(f) for f in parse_table(TABLE)]

    wrappers, fntab, cases, fatal = [], [], [], []
    per_hook = {}
    for fi, f in enumerate(funcs):
        fid = fi + 1
        args = []
        roles = []
        for ctype, pname, arr in f["params"]:
            r = role_of(f, ctype, pname, arr)
            roles.append((pname, r))
            args.append(c_arg(r, ctype, arr))
        wrappers.append("static int f_%d(void) { return %s(%s); }" % (fid, f["name"], ", ".join(args)))
        flags = []
        b = f["base"]
        if b.startswith("neighbor"):
            flags.append("FN_NEIGH")
        if b.endswith("w"):
            flags.append("FN_W")
        if f["fam"] == "FAM_COLL" and b in ROOT_SIDE:
            flags.append("FN_ROOTED")
        fntab.append('    {"%s", f_%d, %s, %s, B_%s, %s, %s},' % (
            f["name"], fid, f["fam"], f["form"], b.upper(),
            '"%s"' % f["coll"] if f["coll"] else "NULL", "|".join(flags) or "0"))

        rows = []  # (pname, label, role, val, cls, flags, alg)
        for pname, r in roles:
            for label, val, cls, fl, algs in values_for(f, r):
                for alg in algs:
                    rows.append((pname, label, r, val, cls, fl, alg))
        for pname, label, val, cls, fl, algs in extra_cases(f):
            for alg in algs:
                rows.append((pname, label, "R_NONE", val, cls, fl, alg))
        if len(rows) >= 100:
            raise SystemExit("%s: %d cases (ids allow 99)" % (f["name"], len(rows)))
        has_comm = any(r == "R_COMM" for _, r in roles)
        seen = set()
        for k, (pname, label, r, val, cls, fl, alg) in enumerate(rows):
            cid = fid * 100 + k
            name = "%s %s=%s" % (f["name"], pname, label)
            if alg:
                name += " alg=" + alg
            fl = list(fl)
            obj = "F_OBJ" in fl or (has_comm and not (r == "R_COMM" and val != "V_NOTOPO"))
            if obj and "F_OBJ" not in fl:
                fl.append("F_OBJ")
            row = (cid, fid - 1, r, val, cls, fl, alg, name)
            cases.append(row)
            per_hook[f["hook"]] = per_hook.get(f["hook"], 0) + 1
            if obj:
                key = (cls, alg)
                full_only = key in seen
                seen.add(key)
                fatal.append((FATAL_BASE + cid, fid - 1, r, val, cls,
                              fl + (["F_FULL"] if full_only else []) + ["F_FATAL"], alg,
                              name + " [world-fatal]"))

    def crow(c):
        cid, fi, r, val, cls, fl, alg, name = c
        return '    {%d, %d, %s, %s, %s, %s, %s, "%s"},' % (
            cid, fi, r, val, cls, "|".join(fl) or "0",
            '"%s"' % alg if alg else "NULL", name)

    bases = COLL_BASES + REQ_BASES + list(P2P_BASES) + list(PACK_FAMS)
    bases += sorted({f["base"] for f in funcs} - set(bases))
    enum_bases = ",\n    ".join("B_" + b.upper() for b in bases)
    text = RUNTIME.replace("@HARNESS@", HARNESS).replace("@BASES@", enum_bases)
    text = text.replace("@WRAPPERS@", "\n".join(wrappers))
    text = text.replace("@FNTAB@", "\n".join(fntab))
    text = text.replace("@CASES@", "\n".join(crow(c) for c in cases + fatal))
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as fh:
        fh.write("/* Generated by ctests/conform/gen_errors.py from src/platform/abi/mpi_functions.txt:"
                 " do not edit.\n * %d functions, %d cases (%s), %d world-fatal variants"
                 " (%d at the default level). */\n" % (
                     len(funcs), len(cases),
                     ", ".join("%s %d" % kv for kv in sorted(per_hook.items())),
                     len(fatal), sum(1 for c in fatal if "F_FULL" not in c[5])))
        fh.write(text)
    sys.stderr.write("gen_errors: %d functions, %d cases (%s), %d world-fatal variants "
                     "(%d at the default level)\n" % (
                         len(funcs), len(cases),
                         ", ".join("%s %d" % kv for kv in sorted(per_hook.items())),
                         len(fatal), sum(1 for c in fatal if "F_FULL" not in c[5])))


# ---------------------------------------------------------------------------------------
# The C runtime (the generated parts replace @...@).

RUNTIME = r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>
#include <stdint.h>
#include "@HARNESS@"

#define CNT 2            /* elements per block */
#define MAXP 64          /* largest communicator (blocks per buffer) */
#define BUFN (8 * CNT * MAXP + 64)
#define BIGBYTES ((int)sizeof(double) * BUFN)
#define GARBAGE 0x12345678
#define TAG 7

enum { FAM_COLL, FAM_SEND, FAM_RECV, FAM_SENDRECV, FAM_SRREPL, FAM_PROBE, FAM_MRECV,
       FAM_PACK, FAM_UNPACK, FAM_PACKEXT, FAM_UNPACKEXT, FAM_PACKSIZE, FAM_REQ, FAM_HANDLE };
enum { FORM_BLOCK, FORM_NB, FORM_PERSIST };
enum {
    @BASES@
};
enum { R_NONE, R_SBUF, R_RBUF, R_SCOUNT, R_RCOUNT, R_COUNT, R_STYPE, R_RTYPE, R_DTYPE,
       R_SCOUNTS, R_RCOUNTS, R_SDISPLS, R_RDISPLS, R_STYPES, R_RTYPES, R_OP, R_ROOT, R_COMM,
       R_INFO, R_REQP, R_REQ, R_DEST, R_SOURCE, R_STAG, R_RTAG, R_MSG, R_POS, R_PSIZE,
       R_DATAREP, R_SIZEP, R_STATUS, R_NREQ, R_REQS, R_FLAG, R_INDX, R_OUTCOUNT, R_INDICES,
       R_STATUSES, R_COMMP, R_TYPEP, R_OPP, R_ERRH, R_ERRHP, R_ERRCODE };
enum { V_NULLPTR, V_NULLH, V_GARBAGE, V_STALE, V_UNCOMMITTED, V_NOTOPO, V_NEG, V_INPLACE,
       V_ALIAS, V_ROOTNEG, V_ROOTSIZE, V_BAND_DOUBLE, V_MINLOC_INT, V_RANK_SIZE, V_RANK_NEG,
       V_TAG_NEG, V_TAG_UB, V_TAG_ANY, V_SMALL, V_BOGUS, V_MSGNULL, V_TRUNC, V_NONPERSIST,
       V_ACTIVECOLL, V_PREDEF };
#define FN_NEIGH 1
#define FN_W 2
#define FN_ROOTED 4
#define F_ASYM 1
#define F_REDO 2
#define F_NEED2 4
#define F_OBJ 8
#define F_FATAL 16
#define F_FULL 32

typedef struct {
    const char *name;
    int (*call)(void);
    int fam, form, base;
    const char *coll; /* for shim_set_algorithm */
    int flags;
} fn_t;

typedef struct {
    int id, f, role, val, expect, flags;
    const char *alg;
    const char *name;
} case_t;

static double sbuf_d[BUFN], rbuf_d[BUFN], pbuf_d[BUFN], xbuf_d[BUFN];
static int xint;
static MPI_Datatype VEC; /* vector(2,1,2,MPI_INT): the derived baseline type of p2p/pack */
static int g_tag_ub;
static int (*p_set_alg)(const char *, const char *);
static int (*p_algs)(const char *, char *, size_t);

static struct {
    MPI_Comm vcomm, comm, extra;
    int vsize, vrank, nblk;
    const void *sbuf;
    void *rbuf;
    MPI_Count scount, rcount, count, psize;
    MPI_Datatype stype, rtype, dtype;
    int scounts_v[MAXP], rcounts_v[MAXP], sdispls_v[MAXP], rdispls_v[MAXP];
    MPI_Count scountsc_v[MAXP], rcountsc_v[MAXP];
    MPI_Aint sdisplsa_v[MAXP], rdisplsa_v[MAXP];
    MPI_Datatype stypes_v[MAXP], rtypes_v[MAXP];
    const int *scounts_i, *rcounts_i, *sdispls_i, *rdispls_i;
    const MPI_Count *scounts_c, *rcounts_c;
    const MPI_Aint *sdispls_a, *rdispls_a;
    const MPI_Datatype *stypes, *rtypes;
    MPI_Op op;
    int root;
    MPI_Info info;
    MPI_Request req, *reqp;
    int dest, source, stag, rtag;
    MPI_Status st, *statusp;
    MPI_Message msg, *msgp, msg_saved;
    int pos_i, *posp_i;
    MPI_Aint pos_a, *posp_a;
    MPI_Count pos_c, *posp_c;
    const char *datarep;
    MPI_Aint size_a, *sizep_a;
    MPI_Count size_c, *sizep_c;
    int nreq;
    MPI_Request reqs_v[4], *reqs;
    int flag, *flagp, indx, *indxp, outcount, *outcountp, indices_v[4], *indices;
    MPI_Status sts_v[4], *statuses;
    int call_rc;
    MPI_Comm hcomm, *commp;
    MPI_Datatype htype, *typep;
    MPI_Op hop, *opp;
    MPI_Errhandler errh, errh_out, *errhp;
    int errcode;
    /* clean-up */
    MPI_Request pre_recv;
    MPI_Request sends[4];
    int nsends;
    MPI_Request *owned[4];
    int owned_persist[4], nowned;
    MPI_Datatype tmp_types[4];
    int ntmp_types;
} X;

/* ---- generated: one wrapper per function, passing the arguments from X ---- */
@WRAPPERS@

static const fn_t FN[] = {
@FNTAB@
};

static const case_t CASES[] = {
@CASES@
};

/* ---- runtime ---- */

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

static int alg_forced;
static const char *alg_coll;
static void force_alg(const fn_t *fn, const char *alg) {
    alg_forced = 0;
    if (!alg || !fn->coll || !p_set_alg || !p_algs) return;
    char list[1024];
    if (p_algs(fn->coll, list, sizeof list) < 0) return;
    size_t n = strlen(alg);
    for (char *p = list; p && *p;) {
        char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, alg, n) == 0) {
            if (p_set_alg(fn->coll, alg) == 0) {
                alg_forced = 1;
                alg_coll = fn->coll;
            }
            return;
        }
        p = e ? e + 1 : NULL;
    }
    if (h_rank == 0) fprintf(stderr, "note: the shim has no algorithm %s for %s\n", alg, fn->coll);
}
static void unforce_alg(void) {
    if (alg_forced) p_set_alg(alg_coll, NULL);
    alg_forced = 0;
}

static void world_fatal(int on) {
    MPI_Errhandler e = on ? MPI_ERRORS_ARE_FATAL : MPI_ERRORS_RETURN;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, e);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, e);
}

/* The case's valid communicator; returns 0 (on every rank) when it cannot be made. */
static int make_comms(const fn_t *fn, int id) {
    int rc, ok, all;
    X.vcomm = MPI_COMM_NULL;
    if (fn->flags & FN_NEIGH) {
        int dims[1] = {h_size}, periods[1] = {1};
        rc = MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &X.vcomm);
    } else {
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &X.vcomm);
    }
    ok = rc == MPI_SUCCESS && X.vcomm != MPI_COMM_NULL;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, h_comm);
    if (!all) {
        int cls = rc;
        if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
        h_fail(id, "set-up: %s of MPI_COMM_WORLD failed (%s): communicators leak?",
               (fn->flags & FN_NEIGH) ? "MPI_Cart_create" : "MPI_Comm_dup", h_class_name(cls));
        if (X.vcomm != MPI_COMM_NULL) MPI_Comm_free(&X.vcomm);
        return 0;
    }
    MPI_Comm_set_errhandler(X.vcomm, MPI_ERRORS_RETURN);
    MPI_Comm_size(X.vcomm, &X.vsize);
    MPI_Comm_rank(X.vcomm, &X.vrank);
    X.extra = MPI_COMM_NULL;
    return 1;
}

static void free_comms(void) {
    MPI_Comm_free(&X.vcomm);
    if (X.extra != MPI_COMM_NULL) MPI_Comm_free(&X.extra);
}

/* The valid baseline of every argument (the communicator stays). */
static void base_values(const fn_t *fn) {
    int p2p = fn->fam != FAM_COLL && fn->fam != FAM_REQ;
    X.comm = X.vcomm;
    X.nblk = (fn->flags & FN_NEIGH) ? 2 : X.vsize;
    for (int i = 0; i < BUFN; i++) {
        ((int *)sbuf_d)[i] = X.vrank * 1000 + i;
        rbuf_d[i] = 0;
    }
    X.sbuf = sbuf_d;
    X.rbuf = rbuf_d;
    X.scount = X.rcount = X.count = CNT;
    X.psize = BIGBYTES;
    X.stype = X.rtype = X.dtype = p2p ? VEC : MPI_INT;
    int unit = (fn->flags & FN_W) ? (int)sizeof(int) : 1;
    for (int i = 0; i < MAXP; i++) {
        X.scounts_v[i] = X.rcounts_v[i] = CNT;
        X.scountsc_v[i] = X.rcountsc_v[i] = CNT;
        X.sdispls_v[i] = X.rdispls_v[i] = i * CNT * unit;
        X.sdisplsa_v[i] = X.rdisplsa_v[i] = i * CNT * unit;
        X.stypes_v[i] = X.rtypes_v[i] = MPI_INT;
    }
    X.scounts_i = X.scounts_v; X.rcounts_i = X.rcounts_v;
    X.scounts_c = X.scountsc_v; X.rcounts_c = X.rcountsc_v;
    X.sdispls_i = X.sdispls_v; X.rdispls_i = X.rdispls_v;
    X.sdispls_a = X.sdisplsa_v; X.rdispls_a = X.rdisplsa_v;
    X.stypes = X.stypes_v; X.rtypes = X.rtypes_v;
    X.op = MPI_SUM;
    X.root = 0;
    X.info = MPI_INFO_NULL;
    X.req = MPI_REQUEST_NULL;
    X.reqp = &X.req;
    X.dest = X.source = X.vrank;
    X.stag = X.rtag = TAG;
    X.statusp = MPI_STATUS_IGNORE;
    X.msgp = &X.msg;
    X.pos_i = 0; X.pos_a = 0; X.pos_c = 0;
    X.posp_i = &X.pos_i; X.posp_a = &X.pos_a; X.posp_c = &X.pos_c;
    X.datarep = "external32";
    X.sizep_a = &X.size_a; X.sizep_c = &X.size_c;
    X.nreq = 2;
    X.reqs_v[0] = X.reqs_v[1] = X.reqs_v[2] = X.reqs_v[3] = MPI_REQUEST_NULL;
    X.reqs = X.reqs_v;
    X.flag = 0; X.flagp = &X.flag;
    X.indx = 0; X.indxp = &X.indx;
    X.outcount = 0; X.outcountp = &X.outcount;
    X.indices = X.indices_v;
    X.statuses = X.sts_v;
    X.hcomm = MPI_COMM_NULL; X.commp = &X.hcomm;
    X.htype = MPI_DATATYPE_NULL; X.typep = &X.htype;
    X.hop = MPI_OP_NULL; X.opp = &X.hop;
    X.errh = MPI_ERRORS_RETURN; X.errh_out = MPI_ERRHANDLER_NULL; X.errhp = &X.errh_out;
    X.errcode = MPI_ERR_OTHER;
}

static MPI_Datatype bad_type(int v) {
    MPI_Datatype t;
    switch (v) {
    case V_NULLH: return MPI_DATATYPE_NULL;
    case V_GARBAGE: return (MPI_Datatype)GARBAGE;
    case V_UNCOMMITTED:
        MPI_Type_contiguous(2, MPI_INT, &t);
        X.tmp_types[X.ntmp_types++] = t;
        return t;
    case V_STALE: { /* used (packed), then freed */
        int pos = 0;
        MPI_Type_contiguous(2, MPI_INT, &t);
        MPI_Type_commit(&t);
        MPI_Pack(sbuf_d, 1, t, xbuf_d, BIGBYTES, &pos, MPI_COMM_SELF);
        MPI_Datatype s = t;
        MPI_Type_free(&t);
        return s;
    }
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Comm bad_comm(int v) {
    MPI_Comm c;
    switch (v) {
    case V_NULLH: return MPI_COMM_NULL;
    case V_GARBAGE: return (MPI_Comm)GARBAGE;
    case V_STALE: { /* used (a barrier), then freed */
        MPI_Comm_dup(X.vcomm, &c);
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        MPI_Barrier(c);
        MPI_Comm s = c;
        MPI_Comm_free(&c);
        return s;
    }
    case V_NOTOPO:
        MPI_Comm_dup(MPI_COMM_WORLD, &X.extra);
        MPI_Comm_set_errhandler(X.extra, MPI_ERRORS_RETURN);
        return X.extra;
    }
    return MPI_COMM_NULL;
}

static MPI_Op bad_op(int v) {
    MPI_Op o;
    switch (v) {
    case V_NULLH: return MPI_OP_NULL;
    case V_GARBAGE: return (MPI_Op)GARBAGE;
    case V_STALE: { /* used (an allreduce), then freed */
        int in = 1, out;
        MPI_Op_create(user_sum, 1, &o);
        MPI_Allreduce(&in, &out, 1, MPI_INT, o, X.vcomm);
        MPI_Op s = o;
        MPI_Op_free(&o);
        return s;
    }
    case V_BAND_DOUBLE: X.dtype = MPI_DOUBLE; return MPI_BAND;
    case V_MINLOC_INT: return MPI_MINLOC;
    }
    return MPI_OP_NULL;
}

/* A run-time truncation: the senders send twice what the receivers receive. In the
 * rooted v-forms the root's own block fits (MPICH's root stops at its own truncated local
 * copy and never sends to the others, who then wait for ever). */
static void coll_trunc(const fn_t *fn) {
    switch (fn->base) {
    case B_BCAST: X.count = X.vrank == X.root ? 2 * CNT : CNT; break;
    case B_SCATTERV: case B_ALLTOALLV:
        for (int i = 0; i < MAXP; i++) {
            X.scounts_v[i] = 2 * CNT; X.scountsc_v[i] = 2 * CNT;
            X.sdispls_v[i] = 2 * CNT * i; X.sdisplsa_v[i] = 2 * CNT * i;
        }
        if (fn->base == B_SCATTERV) X.scounts_v[X.root] = X.scountsc_v[X.root] = CNT;
        break;
    case B_GATHERV:
        X.scount = 2 * CNT;
        for (int i = 0; i < MAXP; i++) { X.rdispls_v[i] = 2 * CNT * i; X.rdisplsa_v[i] = 2 * CNT * i; }
        X.rcounts_v[X.root] = X.rcountsc_v[X.root] = 2 * CNT;
        break;
    default: X.scount = 2 * CNT; break;
    }
}

static MPI_Request *own(MPI_Request *slot, int persist) {
    X.owned[X.nowned] = slot;
    X.owned_persist[X.nowned++] = persist;
    return slot;
}

static MPI_Request pn_request(int persist) {
    MPI_Request r;
    if (persist)
        MPI_Recv_init(&xint, 1, MPI_INT, MPI_PROC_NULL, 0, X.vcomm, &r);
    else
        MPI_Irecv(&xint, 1, MPI_INT, MPI_PROC_NULL, 0, X.vcomm, &r);
    return r;
}

/* A receive of CNT items that a message of 2*CNT items from this rank truncates. */
static MPI_Request trunc_request(void) {
    MPI_Request r;
    MPI_Irecv(rbuf_d, CNT, VEC, X.vrank, TAG + 1, X.vcomm, &r);
    MPI_Isend(sbuf_d, 2 * CNT, VEC, X.vrank, TAG + 1, X.vcomm, &X.sends[X.nsends++]);
    return r;
}

/* A freed request's handle (a persistent one: MPICH answers MPI_PROC_NULL receives with a
 * built-in request handle that stays valid for ever). */
static MPI_Request stale_request(void) {
    MPI_Request r = pn_request(1), s = r;
    MPI_Request_free(&r);
    return s;
}

/* The request family: baseline requests (requests of MPI_PROC_NULL receives complete at
 * once), then the invalid one; freed handles are made last so nothing reuses them. */
static void req_setup(const fn_t *fn, const case_t *c) {
    int b = fn->base;
    int persist = b == B_START || b == B_STARTALL || b == B_REQUEST_FREE;
    int single = b == B_WAIT || b == B_TEST || b == B_REQUEST_GET_STATUS || b == B_START ||
                 b == B_REQUEST_FREE || b == B_CANCEL;
    int role = c->role, v = c->val;
    if (single) {
        if (!((role == R_REQP || role == R_REQ) && v != V_NULLPTR)) {
            X.req = pn_request(persist);
            own(&X.req, persist);
        }
    } else {
        int bad = role == R_REQS && v != V_NULLPTR;
        X.reqs_v[0] = (bad && v == V_TRUNC) ? MPI_REQUEST_NULL : pn_request(persist);
        if (X.reqs_v[0] != MPI_REQUEST_NULL) own(&X.reqs_v[0], persist);
        if (!bad) {
            X.reqs_v[1] = pn_request(persist);
            own(&X.reqs_v[1], persist);
        }
    }
    MPI_Request *slot = single ? &X.req : &X.reqs_v[single ? 0 : 1];
    if (role == R_REQS && v == V_TRUNC) slot = &X.reqs_v[0];
    if ((role == R_REQP || role == R_REQ || role == R_REQS) && v != V_NULLPTR) {
        switch (v) {
        case V_GARBAGE: *slot = (MPI_Request)GARBAGE; break;
        case V_STALE: *slot = stale_request(); break;
        case V_TRUNC: *slot = trunc_request(); own(slot, 0); break;
        case V_NONPERSIST: *slot = pn_request(0); own(slot, 0); break;
        case V_ACTIVECOLL: {
            static int in, out;
            in = 1;
            MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, X.vcomm, slot);
            own(slot, 0);
            break;
        }
        }
    }
    if (role == R_REQP && v == V_NULLPTR) X.reqp = NULL;
    if (role == R_REQS && v == V_NULLPTR) X.reqs = NULL;
    if (role == R_NREQ) X.nreq = -1;
    if (role == R_FLAG) X.flagp = NULL;
    if (role == R_INDX) X.indxp = NULL;
    if (role == R_OUTCOUNT) X.outcountp = NULL;
    if (role == R_INDICES) X.indices = NULL;
    if (role == R_STATUSES) X.statuses = NULL;
}

/* Messages and receives the call under test needs (all to and from this rank itself, so
 * no rank waits for another): a posted receive for sends (MPI_Ssend / MPI_Rsend to self
 * need one), a sent message for receives and probes, a matched message for MPI_Mrecv, a
 * packed buffer for MPI_Unpack. */
static void pre_actions(const fn_t *fn, const case_t *c) {
    int n = c->val == V_TRUNC ? 2 * CNT : CNT;
    X.pre_recv = MPI_REQUEST_NULL;
    switch (fn->fam) {
    case FAM_SEND:
        MPI_Irecv(xbuf_d, BIGBYTES, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, X.vcomm, &X.pre_recv);
        break;
    case FAM_RECV: case FAM_PROBE: case FAM_MRECV:
        MPI_Isend(pbuf_d, n, VEC, X.vrank, TAG, X.vcomm, &X.sends[X.nsends++]);
        if (fn->fam == FAM_MRECV) {
            MPI_Mprobe(X.vrank, TAG, X.vcomm, &X.msg, MPI_STATUS_IGNORE);
            X.msg_saved = X.msg;
        }
        break;
    case FAM_SENDRECV:
        if (c->val == V_TRUNC) X.scount = 2 * CNT;
        break;
    case FAM_UNPACK: {
        int pos = 0;
        MPI_Pack(sbuf_d, CNT, VEC, pbuf_d, BIGBYTES, &pos, X.vcomm);
        X.sbuf = pbuf_d;
        X.psize = pos;
        break;
    }
    case FAM_UNPACKEXT: {
        MPI_Aint pos = 0;
        MPI_Pack_external("external32", sbuf_d, CNT, VEC, pbuf_d, BIGBYTES, &pos);
        X.sbuf = pbuf_d;
        X.psize = pos;
        break;
    }
    case FAM_PACK: case FAM_PACKEXT:
        X.rbuf = pbuf_d;
        break;
    case FAM_REQ:
        req_setup(fn, c);
        break;
    }
}

/* Makes the argument of case c invalid (just before the call: freed handles stay freed). */
static void apply(const fn_t *fn, const case_t *c) {
    int v = c->val;
    int p2p = fn->fam != FAM_COLL && fn->fam != FAM_REQ;
    switch (c->role) {
    case R_SBUF: case R_RBUF: {
        if (v == V_ALIAS) {
            /* the send buffer is where this rank's own block lands in the receive buffer
             * (the whole buffer for the collectives without blocks per rank) */
            int b = fn->base;
            if (b == B_ALLGATHER || b == B_ALLGATHERV || b == B_GATHER || b == B_GATHERV)
                X.sbuf = (int *)X.rbuf + X.vrank * CNT;
            else
                X.rbuf = (void *)X.sbuf;
            break;
        }
        void *p = v == V_NULLPTR ? NULL : v == V_INPLACE ? MPI_IN_PLACE : (void *)X.sbuf;
        if (c->role == R_SBUF) X.sbuf = p; else X.rbuf = p;
        /* a NULL buffer is erroneous with a predefined type only */
        if (p2p && v == V_NULLPTR) X.stype = X.rtype = X.dtype = MPI_INT;
        break;
    }
    case R_SCOUNT: X.scount = -1; break;
    case R_RCOUNT: X.rcount = -1; break;
    case R_COUNT: X.count = -1; break;
    case R_PSIZE: X.psize = v == V_SMALL ? 4 : -1; break;
    case R_STYPE: X.stype = bad_type(v); break;
    case R_RTYPE: X.rtype = bad_type(v); break;
    case R_DTYPE: X.dtype = bad_type(v); break;
    case R_SCOUNTS: case R_RCOUNTS:
        if (v == V_NULLPTR) {
            if (c->role == R_SCOUNTS) X.scounts_i = NULL, X.scounts_c = NULL;
            else X.rcounts_i = NULL, X.rcounts_c = NULL;
        } else if (c->role == R_SCOUNTS) {
            X.scounts_v[X.nblk - 1] = -1; X.scountsc_v[X.nblk - 1] = -1;
        } else {
            X.rcounts_v[X.nblk - 1] = -1; X.rcountsc_v[X.nblk - 1] = -1;
        }
        break;
    case R_SDISPLS: X.sdispls_i = NULL; X.sdispls_a = NULL; break;
    case R_RDISPLS: X.rdispls_i = NULL; X.rdispls_a = NULL; break;
    case R_STYPES: case R_RTYPES:
        if (v == V_NULLPTR) {
            if (c->role == R_STYPES) X.stypes = NULL; else X.rtypes = NULL;
        } else {
            MPI_Datatype t = bad_type(v);
            if (c->role == R_STYPES) X.stypes_v[X.nblk - 1] = t; else X.rtypes_v[X.nblk - 1] = t;
        }
        break;
    case R_OP: X.op = bad_op(v); break;
    case R_ROOT: X.root = v == V_ROOTNEG ? -1 : X.vsize; break;
    case R_COMM: X.comm = bad_comm(v); break;
    case R_INFO: X.info = (MPI_Info)GARBAGE; break;
    case R_REQP: if (fn->fam != FAM_REQ) X.reqp = NULL; break;
    case R_DEST: X.dest = v == V_RANK_SIZE ? X.vsize : -7; break;
    case R_SOURCE: X.source = v == V_RANK_SIZE ? X.vsize : -7; break;
    case R_STAG: case R_RTAG: {
        int t = v == V_TAG_NEG ? -5 : v == V_TAG_ANY ? MPI_ANY_TAG
                                    : (g_tag_ub < INT_MAX ? g_tag_ub + 1 : -5);
        if (c->role == R_STAG) X.stag = t; else X.rtag = t;
        break;
    }
    case R_MSG:
        if (v == V_NULLPTR) X.msgp = NULL; else X.msg = MPI_MESSAGE_NULL;
        break;
    case R_POS:
        if (v == V_NULLPTR) X.posp_i = NULL, X.posp_a = NULL, X.posp_c = NULL;
        else X.pos_i = -1, X.pos_a = -1, X.pos_c = -1;
        break;
    case R_DATAREP: X.datarep = "bogus"; break;
    case R_SIZEP: X.sizep_a = NULL; X.sizep_c = NULL; break;
    case R_COMMP:
        if (v == V_NULLPTR) X.commp = NULL; else X.hcomm = bad_comm(v);
        break;
    case R_TYPEP:
        if (v == V_NULLPTR) X.typep = NULL;
        else X.htype = v == V_PREDEF ? MPI_INT : bad_type(v);
        break;
    case R_OPP:
        if (v == V_NULLPTR) X.opp = NULL;
        else X.hop = v == V_PREDEF ? MPI_SUM : bad_op(v);
        break;
    case R_ERRH: X.errh = v == V_NULLH ? MPI_ERRHANDLER_NULL : (MPI_Errhandler)GARBAGE; break;
    case R_ERRHP: X.errhp = NULL; break;
    case R_NONE:
        if (v == V_TRUNC && fn->fam == FAM_COLL) coll_trunc(fn);
        break;
    }
}

/* The call and its completion; returns the class to report. */
static int invoke(const fn_t *fn) {
    int rc;
    if (fn->fam == FAM_REQ) {
        int b = fn->base;
        if (b == B_TEST || b == B_TESTALL || b == B_TESTANY || b == B_TESTSOME) {
            double t0 = MPI_Wtime();
            for (;;) {
                X.flag = 0;
                X.outcount = 0;
                rc = fn->call();
                if (rc != MPI_SUCCESS) break;
                if (b == B_TESTSOME ? (!X.outcountp || X.outcount != 0) : (!X.flagp || X.flag)) break;
                if (MPI_Wtime() - t0 > 10) break;
            }
        } else {
            rc = fn->call();
        }
        X.call_rc = rc;
        return rc;
    }
    rc = fn->call();
    X.call_rc = rc;
    if (rc != MPI_SUCCESS || X.reqp != &X.req) return rc;
    if (fn->form == FORM_NB) {
        rc = MPI_Wait(&X.req, MPI_STATUS_IGNORE);
    } else if (fn->form == FORM_PERSIST) {
        rc = MPI_Start(&X.req);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&X.req, MPI_STATUS_IGNORE);
    }
    return rc;
}

static void free_persistent(const fn_t *fn) {
    if (fn->form == FORM_PERSIST && X.reqp == &X.req && X.req != MPI_REQUEST_NULL)
        MPI_Request_free(&X.req);
}

/* Drops every message left on the case's communicator (so every send completes). */
static void drain(void) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, X.vcomm, &flag, &st) != MPI_SUCCESS || !flag) return;
        MPI_Recv(xbuf_d, BIGBYTES, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, X.vcomm, MPI_STATUS_IGNORE);
    }
}

static void cleanup(const fn_t *fn, const case_t *c) {
    free_persistent(fn);
    if (X.pre_recv != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Test(&X.pre_recv, &flag, MPI_STATUS_IGNORE);
        if (!flag) {
            MPI_Cancel(&X.pre_recv);
            MPI_Wait(&X.pre_recv, MPI_STATUS_IGNORE);
        }
    }
    if (fn->fam == FAM_MRECV && X.call_rc != MPI_SUCCESS && c->val != V_TRUNC &&
        X.msg_saved != MPI_MESSAGE_NULL)
        MPI_Mrecv(xbuf_d, BIGBYTES, MPI_BYTE, &X.msg_saved, MPI_STATUS_IGNORE);
    if (fn->fam == FAM_PROBE && X.call_rc == MPI_SUCCESS && X.msgp == &X.msg &&
        strstr(fn->name, "Mprobe") && X.msg != MPI_MESSAGE_NULL && X.msg != MPI_MESSAGE_NO_PROC)
        MPI_Mrecv(xbuf_d, BIGBYTES, MPI_BYTE, &X.msg, MPI_STATUS_IGNORE);
    for (int i = 0; i < X.nowned; i++) {
        MPI_Request *s = X.owned[i];
        if (*s == MPI_REQUEST_NULL || *s == (MPI_Request)GARBAGE) continue;
        MPI_Wait(s, MPI_STATUS_IGNORE);
        if (X.owned_persist[i] && *s != MPI_REQUEST_NULL) MPI_Request_free(s);
    }
    double t0 = MPI_Wtime();
    for (int i = 0; i < X.nsends; i++) {
        for (;;) {
            int flag = 1;
            drain();
            if (X.sends[i] == MPI_REQUEST_NULL) break;
            if (MPI_Test(&X.sends[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) break;
            if (MPI_Wtime() - t0 > 10) {
                h_fail(c->id, "clean-up: a send to self never completed");
                break;
            }
        }
    }
    drain();
    for (int i = 0; i < X.ntmp_types; i++) MPI_Type_free(&X.tmp_types[i]);
    if (X.errh_out != MPI_ERRHANDLER_NULL) MPI_Errhandler_free(&X.errh_out);
}

/* Reports the class the ranks that got an error agree on (MPI_SUCCESS if none did). */
static void report(const case_t *c, int rc) {
    int cls = rc, e, lo, hi, anyok, someok;
    if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
    e = cls == MPI_SUCCESS ? INT_MAX : cls;
    anyok = cls == MPI_SUCCESS;
    PMPI_Allreduce(&e, &lo, 1, MPI_INT, MPI_MIN, h_comm);
    PMPI_Allreduce(&cls, &hi, 1, MPI_INT, MPI_MAX, h_comm);
    PMPI_Allreduce(&anyok, &someok, 1, MPI_INT, MPI_MAX, h_comm);
    int agreed = hi == MPI_SUCCESS ? MPI_SUCCESS : lo;
    if (hi != MPI_SUCCESS && lo != hi)
        h_fail(c->id, "ranks returned different error classes (%s .. %s)", h_class_name(lo),
               h_class_name(hi));
    if (hi != MPI_SUCCESS && someok && !(c->flags & F_ASYM) && cls != MPI_SUCCESS)
        h_fail(c->id, "rank %d returned %s, another rank MPI_SUCCESS", h_rank, h_class_name(cls));
    h_rc(c->id, agreed);
}

/* The program goes on: a valid MPI_Allreduce on the case's valid communicator. */
static void go_on(const case_t *c) {
    int in = X.vrank + 1, out = -1;
    int rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, X.vcomm);
    int want = X.vsize * (X.vsize + 1) / 2;
    if (rc != MPI_SUCCESS || out != want)
        h_fail(c->id, "going on: MPI_Allreduce after the case returned %d, sum %d (want %d)", rc, out, want);
}

static void run(const case_t *c) {
    const fn_t *fn = &FN[c->f];
    if ((c->flags & F_FULL) && !h_full && h_only != c->id) return;
    if (!h_begin(c->id, "%s", c->name)) return;
    int expect = c->expect;
    if ((c->flags & F_NEED2) && h_size < 2) expect = MPI_SUCCESS;
    h_expect(c->id, expect);
    memset(&X, 0, sizeof X);
    if (!make_comms(fn, c->id)) {
        h_end(c->id);
        return;
    }
    base_values(fn);
    pre_actions(fn, c);
    force_alg(fn, c->alg);
    if (c->flags & F_FATAL) world_fatal(1);
    apply(fn, c);
    int rc = invoke(fn);
    if (rc != MPI_SUCCESS && (c->flags & F_REDO)) {
        /* the argument is significant at some ranks only: the others may be waiting */
        free_persistent(fn);
        base_values(fn);
        int rc2 = invoke(fn);
        if (rc2 != MPI_SUCCESS) h_fail(c->id, "the valid repeat of the call returned %d", rc2);
    }
    if (c->flags & F_FATAL) world_fatal(0);
    unforce_alg();
    cleanup(fn, c);
    report(c, rc);
    go_on(c);
    free_comms();
    h_end(c->id);
}

int main(int argc, char **argv) {
    h_init(&argc, &argv);
    world_fatal(0); /* MPI_ERRORS_RETURN on MPI_COMM_WORLD and MPI_COMM_SELF */
    if (h_size > MAXP) {
        if (h_rank == 0) fprintf(stderr, "at most %d processes\n", MAXP);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int *ub, flag;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    g_tag_ub = flag ? *ub : 32767;
    MPI_Type_vector(2, 1, 2, MPI_INT, &VEC);
    MPI_Type_commit(&VEC);
    static char bsend_buf[1 << 20];
    MPI_Buffer_attach(bsend_buf, sizeof bsend_buf);
    p_set_alg = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "shim_set_algorithm");
    p_algs = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_algorithms");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run(&CASES[i]);
    void *b;
    int bs;
    MPI_Buffer_detach(&b, &bs);
    MPI_Type_free(&VEC);
    h_finish();
    return 0;
}
'''

if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_errors.py OUT.c")
    generate(sys.argv[1])
