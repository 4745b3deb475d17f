"""Tests of p2pem.data: reading tables, preprocessing, splitting and validating parts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from p2pem.data import check_parts, load_table, pca, split_rows, standardize, synthetic_mixture
from p2pem.errors import ConfigError, DataError

DATA = Path(__file__).resolve().parent.parent / "data"
PARKINSONS = DATA / "parkinsons.data"
AIS = DATA / "ais.csv"


def write(tmp_path: Path, text: str, name: str = "x.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------------- real files


def test_parkinsons_drops_name_and_status() -> None:
    X, names = load_table(PARKINSONS, drop_columns=["name", "status"])
    assert X.shape == (195, 22)
    assert X.dtype == np.float64
    assert len(names) == 22 and "name" not in names and "status" not in names
    assert names[0] == "MDVP:Fo(Hz)" and names[-1] == "PPE"
    # first data line: phon_R01_S01_1,119.99200,157.30200,74.99700,...,0.284654
    assert X[0, 0] == pytest.approx(119.992)
    assert X[0, -1] == pytest.approx(0.284654)


def test_parkinsons_standardized_pca() -> None:
    X, names = load_table(PARKINSONS, drop_columns=["name", "status"])
    Z = standardize(X, column_names=names)
    np.testing.assert_allclose(Z.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(Z.std(axis=0), 1, atol=1e-12)

    scores = pca(Z, 2)
    assert scores.shape == (195, 2)
    np.testing.assert_allclose(scores.mean(axis=0), 0, atol=1e-12)
    variances = scores.var(axis=0)
    assert variances[0] > variances[1]
    # independent reference: the top eigenvalues of the (population) covariance
    eigenvalues = np.linalg.eigvalsh(Z.T @ Z / len(Z))[::-1]
    np.testing.assert_allclose(variances, eigenvalues[:2], rtol=1e-10)
    # the components are uncorrelated
    assert abs(np.mean(scores[:, 0] * scores[:, 1])) < 1e-10


def test_pca_sign_convention() -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 4)) @ rng.standard_normal((4, 4))
    scores = pca(X, 3)
    centred = X - X.mean(axis=0)
    loadings, *_ = np.linalg.lstsq(centred, scores, rcond=None)  # (4, 3): one component per column
    for component in loadings.T:
        assert component[np.argmax(np.abs(component))] > 0
    # flipping the data's sign flips the scores back to the same convention, not to -scores
    np.testing.assert_allclose(pca(-X, 3)[:, 0], -scores[:, 0], atol=1e-10)


def test_ais_needs_non_numeric_columns_dropped() -> None:
    with pytest.raises(DataError) as exc:
        load_table(AIS)
    assert one_line(exc).endswith("ais.csv line 2, column 'sex': 'female' is not a number")
    X, names = load_table(AIS, drop_columns=["sex", "sport"])
    assert X.shape == (202, 11)
    assert names == ("RCC", "WCC", "Hc", "Hg", "Fe", "BMI", "SSF", "Bfat", "LBM", "Ht", "Wt")
    X2, names2 = load_table(AIS, columns=["Ht", "Wt"])
    assert names2 == ("Ht", "Wt")
    np.testing.assert_array_equal(X2, X[:, [9, 10]])


# ------------------------------------------------------------------ parsing details


def test_crlf_quotes_and_column_selection(tmp_path: Path) -> None:
    path = write(tmp_path, 'id,"a, quoted",b\r\nx,1,2\r\n"y",3,"4.5"\r\n')
    X, names = load_table(path, columns=["b", "a, quoted"])
    assert names == ("b", "a, quoted")
    np.testing.assert_array_equal(X, [[2.0, 1.0], [4.5, 3.0]])
    X, names = load_table(path, columns=["id", "a, quoted", "b"], drop_columns=["id"])
    assert names == ("a, quoted", "b")


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b\n1,2\n\n3,4\n5,x\n")
    with pytest.raises(DataError) as exc:
        load_table(path)
    assert one_line(exc) == f"{path} line 5, column 'b': 'x' is not a number"
    X, _ = load_table(write(tmp_path, "a,b\r\n1,2\r\n\r\n3,4\r\n\r\n", "ok.csv"))
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])


#: an empty cell says what to do about missing values (nothing is imputed)
EMPTY = ('empty cell (p2pem imputes nothing: drop incomplete rows first, or give [data] a schema whose csv.missing lists "", '
         "and such rows are dropped and counted)")


@pytest.mark.parametrize(
    ("cell", "complaint"),
    [
        ("abc", "'abc' is not a number"),
        ("nan", "'nan' is not a finite number"),
        ("-inf", "'-inf' is not a finite number"),
        ("", EMPTY),
        ("  ", EMPTY),
    ],
)
def test_bad_cell_names_file_line_and_column(tmp_path: Path, cell: str, complaint: str) -> None:
    rows = "\n".join(f"{i},{20 + i}" for i in range(5))
    path = write(tmp_path, f"Age,BMI\n{rows}\n7,{cell}\n")
    with pytest.raises(DataError) as exc:
        load_table(path)
    assert one_line(exc) == f"{path} line 7, column 'BMI': {complaint}"


def test_bad_cell_in_dropped_column_is_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "Age,BMI\n1,abc\n2,\n")
    X, names = load_table(path, drop_columns=["BMI"])
    assert names == ("Age",)
    np.testing.assert_array_equal(X, [[1], [2]])


def test_multiline_quoted_field_reports_the_record_start(tmp_path: Path) -> None:
    path = write(tmp_path, 'a,b\n1,2\n"3\n",oops\n')
    with pytest.raises(DataError) as exc:
        load_table(path)
    # the record spans lines 3-4; "3\n" is a number with trailing whitespace
    assert one_line(exc) == f"{path} line 3, column 'b': 'oops' is not a number"


def test_ragged_row(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b,c\n1,2,3\n4,5\n")
    with pytest.raises(DataError) as exc:
        load_table(path)
    assert one_line(exc) == f"{path} line 3: expected 3 fields as in the header, got 2"


def test_unknown_columns_list_the_available_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "sex,BMI,Ht\nf,1,2\n")
    with pytest.raises(DataError) as exc:
        load_table(path, columns=["BMI", "Wt", "Age"])
    message = one_line(exc)
    assert "'Wt', 'Age'" in message and "in columns" in message
    assert "(available: 'sex', 'BMI', 'Ht')" in message
    with pytest.raises(DataError) as exc:
        load_table(path, drop_columns=["sexx"])
    assert "'sexx' in drop_columns" in one_line(exc)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "file is empty"),
        ("\n\n", "file is empty"),
        ("a,b\r\n", "no data rows"),
        ("a,a\n1,2\n", "column name 'a' appears twice"),
    ],
)
def test_empty_header_only_duplicate_names(tmp_path: Path, text: str, complaint: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DataError) as exc:
        load_table(path)
    message = one_line(exc)
    assert message.startswith(str(path)) and complaint in message


def test_nothing_left_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b\n1,2\n")
    with pytest.raises(DataError, match="no columns left"):
        load_table(path, drop_columns=["a", "b"])
    missing = tmp_path / "nope.csv"
    with pytest.raises(DataError) as exc:
        load_table(missing)
    assert one_line(exc) == f"{missing}: no such file"
    with pytest.raises(ConfigError):
        load_table(path, columns="a")  # type: ignore[arg-type]


# -------------------------------------------------------------------- preprocessing


def test_standardize_names_a_constant_column() -> None:
    X = np.array([[1.0, 5.0, 0.1], [2.0, 5.0, 0.1], [4.0, 5.0, 0.1]])
    with pytest.raises(DataError) as exc:
        standardize(X, column_names=["a", "flat", "c"])
    assert "column 1 ('flat') is constant" in one_line(exc)
    with pytest.raises(DataError, match="column 1 is constant"):
        standardize(X)
    Z = standardize(X[:, [0]])
    np.testing.assert_allclose(Z.ravel(), (X[:, 0] - X[:, 0].mean()) / X[:, 0].std())


def test_standardize_and_pca_reject_bad_input() -> None:
    with pytest.raises(DataError, match="non-finite"):
        standardize([[1.0, np.nan], [2.0, 3.0]])
    with pytest.raises(DataError, match="2-D"):
        standardize([1.0, 2.0])
    with pytest.raises(DataError, match="3 principal components of data with 5 rows and 2 columns"):
        pca(np.arange(10.0).reshape(5, 2), 3)
    with pytest.raises(ConfigError):
        pca(np.eye(3), 0)
    with pytest.raises(ConfigError):
        pca(np.eye(3), True)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ splitting


def test_even_split_195_rows_over_80_nodes() -> None:
    X = np.arange(195 * 2, dtype=float).reshape(195, 2)
    parts = split_rows(X, 80, how="even", rng=np.random.default_rng(0))
    assert len(parts) == 80
    assert Counter(len(p) for p in parts) == {3: 35, 2: 45}
    together = np.vstack(parts)
    np.testing.assert_array_equal(np.sort(together[:, 0]), X[:, 0])  # every row exactly once
    assert not np.array_equal(together, X)  # shuffled
    again = split_rows(X, 80, how="even", rng=np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_contiguous_split_keeps_order_without_rng() -> None:
    X = np.arange(10.0)[:, None]
    parts = split_rows(X, 3, how="contiguous")
    assert [p.ravel().tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    parts[0][0, 0] = 99.0  # parts are copies
    assert X[0, 0] == 0.0


def test_random_split_may_leave_nodes_empty() -> None:
    X = np.arange(12.0).reshape(6, 2)
    parts = split_rows(X, 10, how="random", rng=np.random.default_rng(1))
    assert len(parts) == 10
    assert sum(len(p) for p in parts) == 6
    assert all(p.shape[1] == 2 for p in parts)
    empty = next(i for i, p in enumerate(parts) if len(p) == 0)
    with pytest.raises(DataError) as exc:
        check_parts(parts, 3)
    assert one_line(exc) == f"node {empty} holds no rows"


def test_split_errors() -> None:
    X = np.zeros((5, 2))
    for how in ("even", "contiguous"):
        with pytest.raises(DataError, match="cannot split 5 rows over 6 nodes"):
            split_rows(X, 6, how=how, rng=np.random.default_rng(0))
    with pytest.raises(ConfigError, match="rng"):
        split_rows(X, 2, how="even")
    with pytest.raises(ConfigError, match="split must be one of"):
        split_rows(X, 2, how="evenly", rng=np.random.default_rng(0))
    with pytest.raises(ConfigError):
        split_rows(X, 0, how="contiguous")


# ------------------------------------------------------------------------ check_parts


def test_check_parts_accepts_good_parts() -> None:
    check_parts([np.zeros((2, 3)), np.ones((1, 3))], 3)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([np.zeros((2, 2))] * 12 + [np.zeros((0, 2))], "node 12 holds no rows"),
        ([np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 3))], "node 2 has 3 columns but node 0 has 2"),
        ([np.zeros((2, 2)), np.zeros(2)], "node 1: data must be 2-D (n_samples, n_features), got shape (2,)"),
        ([np.zeros((2, 2)), np.array([[0.0, 1.0], [np.inf, 0.0]])], "node 1 holds a non-finite value (in its row 1)"),
        ([np.zeros((1, 2)), np.zeros((1, 2))], "all nodes together hold 2 rows, fewer than the 3 components to fit"),
        ([], "no nodes"),
    ],
)
def test_check_parts_errors(parts: list[np.ndarray], message: str) -> None:
    with pytest.raises(DataError) as exc:
        check_parts(parts, 3)
    assert message in one_line(exc)


# ------------------------------------------------------------------------- synthetic


def test_synthetic_mixture_properties() -> None:
    X, labels, params = synthetic_mixture(
        4000, n_features=3, n_components=4, separation=3.0, rng=np.random.default_rng(7)
    )
    assert X.shape == (4000, 3) and labels.shape == (4000,)
    assert params.weights.shape == (4,) and params.means.shape == (4, 3) and params.covariances.shape == (4, 3, 3)
    assert params.weights.sum() == pytest.approx(1.0)
    assert params.weights.min() >= 1 / 8
    distances = np.linalg.norm(params.means[:, None] - params.means[None], axis=-1)
    assert distances[~np.eye(4, dtype=bool)].min() >= 3.0
    for cov in params.covariances:
        np.testing.assert_allclose(cov, cov.T)
        eigenvalues = np.linalg.eigvalsh(cov)
        assert eigenvalues.min() >= 0.25 - 1e-12 and eigenvalues.max() <= 1.0 + 1e-12
    # the samples follow the parameters
    frequencies = np.bincount(labels, minlength=4) / len(labels)
    np.testing.assert_allclose(frequencies, params.weights, atol=0.03)
    for k in range(4):
        np.testing.assert_allclose(X[labels == k].mean(axis=0), params.means[k], atol=0.15)
    again = synthetic_mixture(4000, n_features=3, n_components=4, separation=3.0, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(again[0], X)


def test_synthetic_mixture_rejects_bad_sizes() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError):
        synthetic_mixture(0, rng=rng)
    with pytest.raises(ConfigError):
        synthetic_mixture(10, n_components=True, rng=rng)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        synthetic_mixture(10, separation=-1.0, rng=rng)
