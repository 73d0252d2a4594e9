# Test double of nixpkgs for tests/test_flake.py: only the attributes the flake uses, with plain attrsets
# standing in for derivations, so the flake's own logic evaluates without fetching nixpkgs.
# mkShell returns its arguments, plus the compiler of the stdenv it was given.
let
  fakeDrv =
    name: extra:
    {
      type = "derivation";
      inherit name;
      outPath = "/nix/store/00000000000000000000000000000000-${name}";
    }
    // extra;

  pkgsFor =
    system:
    let
      gccUnwrapped = fakeDrv "gcc-13.4.0" { lib = fakeDrv "gcc-13.4.0-lib" { }; };
      python312Packages = {
        nox = fakeDrv "python3.12-nox-2025.11.12" { };
      };
    in
    {
      inherit system python312Packages;
      python312 = fakeDrv "python3-3.12.12" {
        version = "3.12.12";
        pkgs = python312Packages;
      };
      uv = fakeDrv "uv-0.9.18" { };
      micromamba = fakeDrv "micromamba-2.4.0" { };
      ninja = fakeDrv "ninja-1.13.1" { };
      cmake = fakeDrv "cmake-4.1.2" { };
      git = fakeDrv "git-2.51.2" { };
      gcc13 = fakeDrv "gcc-wrapper-13.4.0" {
        version = "13.4.0";
        cc = gccUnwrapped;
      };
      stdenv = {
        name = "stdenv-linux";
        cc = fakeDrv "gcc-wrapper-14.3.0" {
          version = "14.3.0";
          cc = fakeDrv "gcc-14.3.0" { lib = fakeDrv "gcc-14.3.0-lib" { }; };
        };
      };
      overrideCC = stdenv: cc: stdenv // { inherit cc; };
      runCommand = name: env: buildCommand: fakeDrv name { inherit buildCommand; };
      writeShellScriptBin = name: text: fakeDrv name { inherit text; };
      mkShell = {
        override =
          { stdenv }:
          args:
          args
          // {
            stdenvCompiler = stdenv.cc.name;
          };
      };
    };
in
{
  legacyPackages = {
    x86_64-linux = pkgsFor "x86_64-linux";
    aarch64-linux = pkgsFor "aarch64-linux";
  };
}
