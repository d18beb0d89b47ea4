"""Custom recipes and random bits of stochastic rounding:
- halfway.round(random_bits=b) against the definition of `precision.sr_random_bits`
  (docs/semantics.md): a stochastic rounding with b random bits decides on the top b bits of
  the remainder, so it rounds x as 32 bits round x with the remainder's lower bits cleared
  (element i draws the same stream position either way); negative control: b bits are not
  32 bits on x itself;
- halfway.torch.recipe_from_toml reads the [precision] table with the simulator's parser: one
  step of halfway train's default MLP under a custom TOML precision (pure-bf16, stochastic
  rounding with 4 random bits; a custom fp16 policy with an op rule; [precision.blocks]
  recipes, row-scaled NVFP4 activations among them) and the same step under
  emulate(recipe=recipe_from_toml(file)) give bit-identical gradients, loss and trace records;
  negative control: emulate(random_bits=32) on the 4-bit recipe differs;
- bad files, keys and random_bits are an OSError / ValueError naming the problem."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwtest  # noqa: E402

np = hwtest.np
import halfway  # noqa: E402


class RoundRandomBits(hwtest.unittest.TestCase):
    def test_b_bits_are_32_bits_of_the_truncated_remainder(self):
        rng = np.random.default_rng(7)
        # normal float32 values well inside bf16's range, both signs: bf16 keeps the top 16
        # bits, the remainder is the low 16
        x = (rng.uniform(1, 2, 1 << 14) * 2.0 ** rng.integers(-20, 20, 1 << 14) *
             rng.choice([-1, 1], 1 << 14)).astype(np.float32)
        u = x.view(np.uint32)
        for b in (1, 2, 4, 8, 13, 16, 24, 32):
            with self.subTest(random_bits=b):
                got = halfway.round(x, "bf16", "stochastic", seed=11, random_bits=b)
                keep = 16 - min(b, 16)
                xt = (u & np.uint32(~((1 << keep) - 1) & 0xFFFFFFFF)).view(np.float32)
                want = halfway.round(xt, "bf16", "stochastic", seed=11)
                self.assertTrue(np.array_equal(hwtest.bits32(got), hwtest.bits32(want)))
                if b < 16:  # negative control: the lower bits of the remainder do count at 32
                    full = halfway.round(x, "bf16", "stochastic", seed=11)
                    self.assertFalse(np.array_equal(hwtest.bits32(got), hwtest.bits32(full)))

    def test_bad_random_bits(self):
        for v, exc in ((0, ValueError), (33, ValueError), (-1, ValueError), (True, TypeError),
                       (8.0, TypeError)):
            with self.subTest(random_bits=v):
                with self.assertRaisesRegex(exc, "random_bits"):
                    halfway.round([1.5], "bf16", "stochastic", seed=1, random_bits=v)


torch = hwtest.require("torch", "halfway.torch.emulate")
pd = hwtest.require("pandas", "halfway.train's result frames")
hwtest.require_sim("_Emulator")
import halfway.torch as ht  # noqa: E402
from test_emulate import DefaultMlp, AgainstSimulator  # noqa: E402


def toml_text(precision):
    """The [precision] table as halfway.train writes a config's."""
    return halfway._toml({"precision": precision})


class TomlRecipes(DefaultMlp, hwtest.unittest.TestCase):
    PRECISIONS = {
        "pure-bf16, stochastic, 4 random bits": {"policy": "pure-bf16", "rounding": "stochastic",
                                                 "sr_random_bits": 4},
        "custom fp16, relu in fp32": {"policy": "custom", "low": "fp16",
                                      "ops": {"linear": "lower", "mse": "lower",
                                              "relu": "fp32"}},
        # [precision.blocks]: per-operand options and schemes, a layer with its own recipe.
        "nvfp4, 1-D weights, SR of X, layer 2 in MXFP8": {
            "policy": "nvfp4",
            "blocks": {"weight": "nvfp4", "input_sr": True, "input_rht": False,
                       "layer": [{"match": "2", "input": "mxfp8_e4m3:rceil",
                                  "weight": "mxfp8_e4m3:rceil:block=0",
                                  "grad": "mxfp8_e4m3:rceil", "grad_rht": False}]}},
        # Transformer Engine's row_scaled_activation: X's copies with a global scale per row
        # (fprop) and per column (wgrad), as its recipe runs it (no Hadamard transform).
        "nvfp4, row-scaled activations": {
            "policy": "nvfp4",
            "blocks": {"input": "nvfp4:row_scaled", "input_rht": False}},
        "fp8-blockwise as torchao's rowwise, layer 0 kept": {
            "policy": "fp8-blockwise",
            "blocks": {"input": "fp8_rowwise", "weight": "fp8_rowwise", "grad": "fp8_rowwise",
                       "layer": [{"match": "0", "keep": True}]}},
    }

    def write(self, text):
        path = os.path.join(self.dir.name, f"p{len(os.listdir(self.dir.name))}.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def compare(self, precision, **emu):
        """AgainstSimulator.compare with the config's precision table and the TOML recipe."""
        path = self.write(toml_text(dict(precision)))
        recipe = ht.recipe_from_toml(path)
        runner = AgainstSimulator()
        runner.dir = self.dir
        runner.init, runner.x, runner.y = self.init, self.x, self.y
        sim_precision = {k: v for k, v in precision.items() if k != "policy"}
        runner.config = lambda r, opt, steps, out, p=None: self.config(
            precision["policy"], opt, steps, out, sim_precision)
        emulate = runner.emulate
        runner.emulate = lambda r, accumulation=None: emulate(recipe, **emu)
        return runner.compare(precision["policy"]), recipe

    def test_equal_to_halfway_train(self):
        for label, precision in self.PRECISIONS.items():
            with self.subTest(precision=label):
                (diffs, records_same, names), recipe = self.compare(precision)
                self.assertEqual(diffs, [])
                self.assertTrue(records_same)
                self.assertTrue(names)
                self.assertEqual(recipe.table["sr_random_bits"],
                                 precision.get("sr_random_bits", 32))

    def test_negative_control_random_bits_override(self):
        (diffs, records_same, _), _ = self.compare(
            self.PRECISIONS["pure-bf16, stochastic, 4 random bits"], random_bits=32)
        self.assertIn("2.weight", diffs)
        self.assertFalse(records_same)

    def test_bad_files_and_keys(self):
        with self.assertRaisesRegex(OSError, "no such file"):
            ht.recipe_from_toml(os.path.join(self.dir.name, "missing.toml"))
        cases = {
            "not toml": ("[precision\n", r"\.toml:1"),
            "no table": ('[run]\nsteps = 1\n', "precision"),
            "unknown key": ('[precision]\npolicy = "fp32"\nbogus = 1\n', "precision.bogus"),
            "bad bits": ('[precision]\npolicy = "fp32"\nsr_random_bits = 0\n',
                         "sr_random_bits"),
            "bad policy": ('[precision]\npolicy = "fp7"\n', "fp7"),
            "bad table": ('[precision]\npolicy = "fp32"\n[bogus]\n', "bogus"),
        }
        for label, (text, message) in cases.items():
            with self.subTest(case=label):
                with self.assertRaisesRegex(ValueError, message):
                    ht.recipe_from_toml(self.write(text))

    def test_bad_random_bits(self):
        model = torch.nn.Linear(2, 2)
        for v in (0, 33, True, "8", 4.0):
            with self.subTest(random_bits=v):
                with self.assertRaisesRegex(ValueError, "random_bits"):
                    ht.emulate(model, random_bits=v)


if __name__ == "__main__":
    hwtest.unittest.main()
