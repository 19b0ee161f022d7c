"""One scaling_bench step in PyTorch, at the shapes cohort runs: the peer of cohort's step on the
same card, in the GPU check (scripts/gpu-check.sh).

    scaling_bench --workload resnet50 --layers-json r50.json        # cohort writes its step
    python3 torch_workload_step.py --plan r50.json --json torch-r50.json

The plan (scaling_bench --layers-json) lists the step's work on one rank, layer by layer:

- kind "mlp": the MLP of examples/train_mlp, as nn.Linear layers with ReLU between them,
  softmax cross-entropy averaged over the batch;
- kind "layers": each layer's convolution at the model's shape (forward; backward data and
  filter, as cohort's ConvWork computes both for every layer) or its GEMMs
  (`repeats` x C[side, side] = A[side, depth] x B[depth, side], forward and backward), on
  scratch tensors of real values reused by every layer, as cohort's are;

then plain SGD over every parameter (grads of the layers that run GEMMs stay zero, as in
cohort). The math is the plan's: "fp32" (no TF32 anywhere: cuBLAS and cuDNN in FP32, cuDNN's
heuristics as cohort's) or "tf32" (TF32 matrix products and convolutions). A step is timed as
cohort's: wall time from its start to the end of a device synchronization after the optimizer;
the median of --steps after --warmup.

--validate checks the plan against what this script builds (every parameter, each convolution's
filter against its geometry, the MLP's widths) without allocating or running anything.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


class PlanError(Exception):
    """The plan is not one this script can run: says what and where."""


def _require(condition, message):
    if not condition:
        raise PlanError(message)


def _count(shape):
    return math.prod(shape)


def check_plan(plan):
    """Validates `plan`; returns (parameter count, summary line). Raises PlanError."""
    for key in ("workload", "batch", "math", "kind", "layers", "parameters", "optimizer"):
        _require(key in plan, f"the plan has no '{key}' (write it with scaling_bench --layers-json)")
    _require(plan["math"] in ("fp32", "tf32"), f"math '{plan['math']}': fp32 or tf32 only")
    _require(plan["kind"] in ("mlp", "layers"), f"kind '{plan['kind']}': mlp or layers")
    _require(int(plan["batch"]) > 0, "batch must be positive")
    _require(plan["optimizer"].get("rule") == "sgd", "only plain SGD steps are planned")
    total = 0
    convs = gemms = 0
    for index, layer in enumerate(plan["layers"]):
        where = f"layer {index} ('{layer.get('name', '?')}')"
        for key in ("conv", "forward_gemm", "backward_gemm"):
            layer.setdefault(key, None)
        for param in layer["params"]:
            _require(all(int(d) > 0 for d in param["shape"]),
                     f"{where}: parameter {param['name']} has shape {param['shape']}")
            total += _count(param["shape"])
        conv = layer.get("conv")
        if conv is not None:
            _require(plan["kind"] == "layers", f"{where}: a convolution in an MLP plan")
            _require(layer["params"], f"{where}: a convolution without a filter")
            expected = [conv["filters"], conv["c"], conv["kernel"], conv["kernel"]]
            _require(list(layer["params"][0]["shape"]) == expected,
                     f"{where}: filter {layer['params'][0]['name']} has shape "
                     f"{layer['params'][0]['shape']}, the convolution needs {expected}")
            _require(conv["n"] == plan["batch"], f"{where}: convolution batch {conv['n']} is not "
                     f"the plan's {plan['batch']}")
            out_h = (conv["h"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
            out_w = (conv["w"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
            _require(out_h > 0 and out_w > 0, f"{where}: the convolution has no output")
            convs += 1
        for key in ("forward_gemm", "backward_gemm"):
            gemm = layer.get(key)
            if gemm is not None:
                _require(plan["kind"] == "layers", f"{where}: GEMMs in an MLP plan")
                _require(gemm["side"] > 0 and gemm["depth"] > 0 and gemm["repeats"] > 0,
                         f"{where}: {key} {gemm}")
                gemms += gemm["repeats"]
    _require(total == int(plan["parameters"]),
             f"the layers hold {total} parameters, the plan says {plan['parameters']}")
    if plan["kind"] == "mlp":
        mlp = plan["mlp"]
        _require(len(plan["layers"]) == mlp["layers"], "the MLP's layer count differs")
        for index, layer in enumerate(plan["layers"]):
            fan_in = mlp["inputs"] if index == 0 else mlp["hidden"]
            fan_out = mlp["classes"] if index == mlp["layers"] - 1 else mlp["hidden"]
            shapes = [list(p["shape"]) for p in layer["params"]]
            _require(shapes == [[fan_out, fan_in], [fan_out]],
                     f"MLP layer {index}: parameters {shapes}, expected "
                     f"[[{fan_out}, {fan_in}], [{fan_out}]]")
    summary = (f"{plan['workload']}: {total} parameters in {len(plan['layers'])} layers, batch "
               f"{plan['batch']}, {plan['math']}, {convs} convolutions, {gemms} GEMMs a pass")
    return total, summary


def set_math(torch, math_mode):
    tf32 = math_mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    # cuDNN's heuristics, as cohort's (Note [Convolution algorithms]), not a timed search.
    torch.backends.cudnn.benchmark = False


def make_sgd(torch, params, lr, device):
    """torch.optim.SGD, fused where this PyTorch has it on this device, else its default."""
    if device.type == "cuda":
        try:
            return torch.optim.SGD(params, lr=lr, momentum=0.0, fused=True), "fused"
        except (TypeError, RuntimeError, ValueError):
            pass
    return torch.optim.SGD(params, lr=lr, momentum=0.0), "default (foreach on GPUs)"


def uniform(torch, shape, bound, device, generator):
    return (torch.rand(shape, generator=generator, device="cpu") * 2 - 1).mul_(bound).to(device)


def build_mlp(torch, plan, device, generator):
    mlp = plan["mlp"]
    modules = []
    for index, layer in enumerate(plan["layers"]):
        out_features, in_features = layer["params"][0]["shape"]
        modules.append(torch.nn.Linear(in_features, out_features))
        if index + 1 < len(plan["layers"]):
            modules.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*modules).to(device)
    batch = plan["batch"]
    inputs = uniform(torch, (batch, mlp["inputs"]), 1.0, device, generator)
    labels = torch.randint(0, mlp["classes"], (batch,), generator=generator).to(device)
    params = list(model.parameters())
    optimizer, kind = make_sgd(torch, params, plan["optimizer"]["lr"], device)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()

    return step, params, kind


def build_layers(torch, plan, device, generator):
    functional = torch.nn.functional
    params = []
    conv_filters = {}  # layer index -> its filter
    for index, layer in enumerate(plan["layers"]):
        for position, param in enumerate(layer["params"]):
            shape = tuple(param["shape"])
            if layer["conv"] is not None and position == 0:
                conv = layer["conv"]
                bound = math.sqrt(3.0 / (conv["c"] * conv["kernel"] * conv["kernel"]))
                tensor = uniform(torch, shape, bound, device, generator)
                conv_filters[index] = tensor
            else:
                tensor = torch.zeros(shape, device=device)
            tensor.requires_grad_(False)
            tensor.grad = torch.zeros_like(tensor)
            params.append(tensor)
    # Scratch of real values, reused by every layer (cohort's ConvWork and Math::gemm_work).
    largest_in = largest_out = 1
    for layer in plan["layers"]:
        conv = layer["conv"]
        if conv is None:
            continue
        out_h = (conv["h"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
        out_w = (conv["w"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
        largest_in = max(largest_in, conv["n"] * conv["c"] * conv["h"] * conv["w"])
        largest_out = max(largest_out, conv["n"] * conv["filters"] * out_h * out_w)
    inputs = uniform(torch, (largest_in,), 1.0, device, generator)
    output_grads = uniform(torch, (largest_out,), 1.0, device, generator)
    gemm_depth = max([g["depth"] for layer in plan["layers"]
                      for g in (layer["forward_gemm"], layer["backward_gemm"]) if g] or [8])
    gemm_side = max([g["side"] for layer in plan["layers"]
                     for g in (layer["forward_gemm"], layer["backward_gemm"]) if g] or [8])
    a = uniform(torch, (gemm_side * gemm_depth,), 1.0, device, generator)
    b = uniform(torch, (gemm_side * gemm_depth,), 1.0, device, generator)
    c = torch.empty((gemm_side * gemm_side,), device=device)

    def gemms(shape):
        if shape is None:
            return
        side, depth = shape["side"], shape["depth"]
        left = a[: side * depth].view(side, depth)
        right = b[: depth * side].view(depth, side)
        out = c[: side * side].view(side, side)
        for _ in range(shape["repeats"]):
            torch.mm(left, right, out=out)

    def conv_views(conv):
        out_h = (conv["h"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
        out_w = (conv["w"] + 2 * conv["padding"] - conv["kernel"]) // conv["stride"] + 1
        x = inputs[: conv["n"] * conv["c"] * conv["h"] * conv["w"]].view(
            conv["n"], conv["c"], conv["h"], conv["w"])
        dy = output_grads[: conv["n"] * conv["filters"] * out_h * out_w].view(
            conv["n"], conv["filters"], out_h, out_w)
        return x, dy

    optimizer, kind = make_sgd(torch, params, plan["optimizer"]["lr"], device)
    layers = plan["layers"]

    def step():
        for index, layer in enumerate(layers):
            conv = layer["conv"]
            if conv is not None:
                x, _ = conv_views(conv)
                functional.conv2d(x, conv_filters[index], stride=conv["stride"],
                                  padding=conv["padding"])
            else:
                gemms(layer["forward_gemm"])
        for index in range(len(layers) - 1, -1, -1):
            layer = layers[index]
            conv = layer["conv"]
            if conv is not None:
                x, dy = conv_views(conv)
                stride, padding = [conv["stride"]] * 2, [conv["padding"]] * 2
                _, grad_filter, _ = torch.ops.aten.convolution_backward(
                    dy, x, conv_filters[index], None, stride, padding, [1, 1], False, [0, 0], 1,
                    [True, True, False])
                conv_filters[index].grad = grad_filter
            else:
                gemms(layer["backward_gemm"])
        optimizer.step()

    return step, params, kind


def run(plan, device_name, steps, warmup, seed):
    import torch

    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # the host tests' tiny plans: one thread, as cohort's host ranks
    set_math(torch, plan["math"])
    generator = torch.Generator().manual_seed(seed)
    build = build_mlp if plan["kind"] == "mlp" else build_layers
    with torch.no_grad() if plan["kind"] == "layers" else _nothing():
        step, params, optimizer_kind = build(torch, plan, device, generator)
        before = [p.detach().clone() for p in params]

        def synchronize():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        for _ in range(warmup):
            step()
        synchronize()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        updated = sum(1 for old, new in zip(before, params) if not torch.equal(old, new.detach()))
        finite = all(bool(torch.isfinite(p).all()) for p in params)
    median_ms = statistics.median(times)
    return {
        "peer": "pytorch",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "workload": plan["workload"],
        "batch": plan["batch"],
        "math": plan["math"],
        "optimizer": "sgd, " + optimizer_kind,
        "allow_tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                       "cudnn": torch.backends.cudnn.allow_tf32},
        "parameters": sum(p.numel() for p in params),
        "parameter_tensors": len(params),
        "updated_parameter_tensors": updated,
        "finite": finite,
        "warmup": warmup,
        "step_ms": times,
        "median_step_ms": median_ms,
        "throughput": plan["batch"] / median_ms * 1e3,
        "sample_unit": plan.get("sample_unit", "samples"),
    }


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", required=True, action="append",
                        help="scaling_bench --layers-json output (repeat for several workloads, "
                             "run one after the other in this process)")
    parser.add_argument("--device", default="cuda:0", help="cuda:0 (default) or cpu")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the result here (one plan)")
    parser.add_argument("--out-dir", help="write each result to DIR/torch-WORKLOAD.json")
    parser.add_argument("--validate", action="store_true",
                        help="check the plans only: no torch, nothing allocated or run")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be at least 1 and --warmup at least 0")
    if args.json and len(args.plan) > 1:
        parser.error("--json takes one --plan; use --out-dir for several")
    plans = []
    for path in args.plan:
        try:
            with open(path) as handle:
                plan = json.load(handle)
            count, summary = check_plan(plan)
        except (OSError, ValueError, KeyError, TypeError, PlanError) as error:
            print(f"torch_workload_step: {path}: {type(error).__name__}: {error}", file=sys.stderr)
            return 2
        plans.append((plan, count, summary))
    if args.validate:
        for _, _, summary in plans:
            print(f"torch_workload_step: plan ok: {summary}")
        return 0
    status = 0
    for plan, count, summary in plans:
        try:
            result = run(plan, args.device, args.steps, args.warmup, args.seed)
        except RuntimeError as error:  # out of memory, a kernel error: the next plan may run
            print(f"torch_workload_step: {plan['workload']}: {error}", file=sys.stderr)
            status = 1
            continue
        finally:
            _release(args.device)
        if result["parameters"] != count:
            print(f"torch_workload_step: {plan['workload']}: built {result['parameters']} "
                  f"parameters, the plan has {count}", file=sys.stderr)
            status = 1
            continue
        print(f"torch_workload_step: PyTorch {result['torch']} on {result['device']}, {summary}, "
              f"{result['optimizer']}: median {result['median_step_ms']:.3f} ms/step, "
              f"{result['throughput']:.1f} {result['sample_unit']}/s over {args.steps} steps",
              flush=True)
        path = args.json
        if args.out_dir:
            path = os.path.join(args.out_dir, f"torch-{plan['workload']}.json")
        if path:
            with open(path, "w") as handle:
                json.dump(result, handle, indent=2)
                handle.write("\n")
    return status


def _release(device_name):
    """Gives the cached memory of one workload back before the next."""
    import gc

    gc.collect()
    if device_name.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
