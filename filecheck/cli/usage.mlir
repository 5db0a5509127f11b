// RUN: not xfuse-opt %s --emit=png 2>&1 | filecheck %s --check-prefix=CHOICE
// RUN: not xfuse-opt %s --no-such-flag 2>&1 | filecheck %s --check-prefix=FLAG
// RUN: printf '' > %t.empty && xfuse-opt %t.empty -p decompose,fuse-greedy | filecheck %s --check-prefix=EMPTY
// RUN: not xfuse-opt %t.empty --no-implicit-module 2>&1 | filecheck %s --check-prefix=NO-MODULE
// RUN: not xfuse-opt %S 2>&1 | filecheck %s --check-prefix=DIRECTORY
// RUN: xfuse-opt --help | filecheck %s --check-prefix=HELP

// A usage error is one line (no usage block) with status 1, as every other bad input.
// CHOICE: xfuse-opt: error: argument --emit: invalid choice: 'png' (choose from 'ir', 'dot')
// CHOICE-NOT: usage:
// FLAG: xfuse-opt: error: unrecognized arguments: --no-such-flag
// FLAG-NOT: usage:

// An input with no op is an empty module, as in mlir-opt; without the implicit module it is an
// error that names the file.
// EMPTY: builtin.module {
// EMPTY-NEXT: }
// NO-MODULE: usage.mlir.tmp.empty:1:1: error: the input is empty: expected a builtin.module operation
// DIRECTORY: error: cannot read '{{.*}}cli': Is a directory
// DIRECTORY-NOT: Traceback

// `--help` lists xfuse's passes with what each does, then xDSL's, no name split at a hyphen.
// HELP: -v, --version Print the version of xDSL
// HELP: xfuse passes (-p):
// HELP-NEXT: decompose Rewrite every composite graph op into graph
// HELP: fuse-greedy Greedy producer-consumer fusion into
// HELP: xDSL passes (-p), also available:
// HELP-NEXT: apply-eqsat-pdl,
// HELP-NOT: fuse-greedy

func.func @f() {
  func.return
}
