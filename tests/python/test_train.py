"""halfway.train: a simulator configuration in, its result files as pandas DataFrames out.
The same run given as TOML text, as a file and as a dict gives identical frames; the frames are
the files' contents; the thread count changes nothing; config errors are ValueErrors."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import hwtest  # noqa: E402
from configs import config  # noqa: E402

pd = hwtest.require("pandas", "halfway.train's DataFrames")
import halfway  # noqa: E402

hwtest.require_sim("_train_to_dir")

TEXT = config("mlp", model={"layers": [6, 16, 1], "activation": "relu"},
              data={"batch_size": 32}, run={"steps": 3, "seed": 7})
DICT = {
    "model": {"kind": "mlp", "layers": [6, 16, 1], "activation": "relu"},
    "data": {"synthetic": "regression", "n": 256, "batch_size": 32},
    "loss": {"kind": "mse"},
    "optimizer": {"kind": "adam", "lr": 0.01},
    "precision": {"policy": "torch-cuda-fp16"},
    "scaler": {"kind": "dynamic"},
    "run": {"steps": 3, "seed": 7},
}
FRAMES = ("steps", "trace", "scale_window", "memory", "blocks")


class Train(hwtest.unittest.TestCase):
    def assertSameRun(self, a, b):
        for name in FRAMES:
            pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)

    def test_text_file_and_dict_agree(self):
        a = halfway.train(TEXT)
        self.assertEqual(len(a.steps), 3)
        self.assertEqual(list(a.steps.step), [0, 1, 2])
        self.assertEqual(float(a.steps.loss_scale[0]), 65536.0)  # GradScaler's initial scale
        self.assertGreater(len(a.trace), 0)
        self.assertTrue({"name", "dtype", "flushed", "subnormal"} <= set(a.trace.columns))
        self.assertEqual(set(a.scale_window.step), {0, 1, 2})
        self.assertIsNone(a.out_dir)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "run.toml")
            with open(path, "w") as f:
                f.write(TEXT)
            self.assertSameRun(a, halfway.train(path))
        self.assertSameRun(a, halfway.train(DICT))
        self.assertSameRun(a, halfway.train(TEXT, threads=2))

    def test_out_dir_keeps_the_files(self):
        with tempfile.TemporaryDirectory() as d:
            r = halfway.train(DICT, out_dir=d)
            self.assertEqual(r.out_dir, d)
            for name in FRAMES:
                pd.testing.assert_frame_equal(getattr(r, name),
                                              pd.read_csv(os.path.join(d, name + ".csv")))
            self.assertEqual(r.manifest["seed"], 7)

    def test_block_policy_blocks_frame(self):
        # blocks.csv: one row per block-scaled operand copy of a traced step (none for fp16).
        self.assertEqual(len(halfway.train(DICT).blocks), 0)
        r = halfway.train(dict(DICT, precision={"policy": "mxfp8"}, scaler={"kind": "none"}))
        self.assertEqual(set(r.blocks.step), {0, 1, 2})
        self.assertEqual(set(r.blocks.gemm), {"fprop", "dgrad", "wgrad"})
        self.assertTrue({"flushed", "saturated", "snr_db", "scale_hist"} <= set(r.blocks.columns))
        self.assertTrue((r.blocks.elements > 0).all())

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "unknown"):
            halfway.train(dict(DICT, model={"kind": "mlpx", "layers": [6, 1]}))
        with self.assertRaisesRegex(ValueError, "no such config file"):
            halfway.train("does-not-exist.toml")
        with self.assertRaises(TypeError):
            halfway.train(42)
        with self.assertRaisesRegex(ValueError, "threads"):
            halfway.train(TEXT, threads=0)

    def test_limits(self):
        # d_model * mlp_ratio wrapped an int and crashed the interpreter (SIGSEGV).
        bad = dict(DICT, model={"kind": "transformer", "vocab": 16, "seq_len": 8, "d_model": 4,
                                "heads": 2, "mlp_ratio": 1073741824},
                   data={"synthetic": "copy", "batch_size": 4}, loss={"kind": "cross_entropy"})
        with self.assertRaisesRegex(ValueError, "mlp_ratio"):
            halfway.train(bad)
        with self.assertRaisesRegex(ValueError, "estimated"):
            halfway.train(DICT, max_memory="1K")
        with self.assertRaisesRegex(ValueError, "estimated"):
            halfway.train(DICT, max_memory=4096)
        with self.assertRaisesRegex(ValueError, "memory size"):
            halfway.train(DICT, max_memory="lots")
        with self.assertRaises(ValueError):
            halfway.train(DICT, max_memory=0)
        with self.assertRaises(TypeError):
            halfway.train(DICT, max_memory=1.5)
        with self.assertRaisesRegex(ValueError, "max_memory"):
            halfway.train(DICT, max_memory="")
        self.assertEqual(len(halfway.train(DICT, max_memory="1G").steps), 3)
        with self.assertRaisesRegex(ValueError, "below the smallest positive fp32"):
            halfway.train(dict(DICT, scaler={"kind": "dynamic", "init_scale": 1e-50}))
        with self.assertRaisesRegex(ValueError, "overflow fp32"):
            halfway.train(dict(DICT, optimizer={"kind": "adam", "lr": 1e308}))


if __name__ == "__main__":
    hwtest.main()
