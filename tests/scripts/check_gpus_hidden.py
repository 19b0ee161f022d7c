"""Every ctest test that starts several ranks of a program choosing its backend automatically hides
the GPUs, unless it is a GPU test: on a machine with 1 to 3 GPUs the automatic choice takes NCCL,
which refuses more ranks than GPUs, so a test meant for host ranks would fail there (issue 28,
item 7). A test hides them with CUDA_VISIBLE_DEVICES empty in its ENVIRONMENT, or asks for host
ranks on its command line (--host).

    check_gpus_hidden.py BUILD_DIR

Reads `ctest --show-only=json-v1` of the build. A test starts ranks when its command runs a
launcher (cohortrun --nproc-per-node, mpirun, srun, torchrun through tests/launch/launchers.sh),
the multi-node scripts (fake hosts), or train_mlp with --ranks.
"""
import json
import subprocess
import sys

LAUNCHING = ("--nproc-per-node", "launchers.sh", "mpirun", "/tests/multinode/",
             "check_train_mlp_memory.py")


def starts_ranks(command):
    text = " ".join(command)
    if any(marker in text for marker in LAUNCHING):
        return True
    return any("train_mlp" in part for part in command) and "--ranks" in command


def hides_gpus(test):
    properties = {p["name"]: p["value"] for p in test.get("properties", [])}
    labels = properties.get("LABELS", [])
    if "gpu" in labels:
        return True, "a GPU test"
    if "--host" in test.get("command", []):
        return True, "--host"
    environment = properties.get("ENVIRONMENT", [])
    if "CUDA_VISIBLE_DEVICES=" in environment:
        return True, "CUDA_VISIBLE_DEVICES="
    return False, ""


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    listing = subprocess.run(["ctest", "--show-only=json-v1"], cwd=argv[1], capture_output=True,
                             text=True, check=False)
    if listing.returncode != 0:
        print(f"ctest --show-only failed in {argv[1]}: {listing.stderr}", file=sys.stderr)
        return 1
    tests = json.loads(listing.stdout)["tests"]
    launching = [t for t in tests if starts_ranks(t.get("command", []))]
    unhidden = []
    for test in launching:
        hidden, how = hides_gpus(test)
        print(f"{'ok  ' if hidden else 'FAIL'} {test['name']}: {how or 'the GPUs are visible'}")
        if not hidden:
            unhidden.append(test["name"])
    if not launching:
        print("FAIL: no test starts ranks: the detection no longer matches the test commands")
        return 1
    if unhidden:
        print(f"{len(unhidden)} test(s) start ranks with the automatic backend and the GPUs visible: "
              f"add ENVIRONMENT \"CUDA_VISIBLE_DEVICES=\" (or --host) where the test means host "
              f"ranks: {', '.join(unhidden)}")
        return 1
    print(f"{len(launching)} tests start ranks; each hides the GPUs or asks for host ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
