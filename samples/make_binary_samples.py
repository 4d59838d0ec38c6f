"""Regenerate the sample corpus's DOCX and PDF files from the text below.

Binary samples are generated rather than hand-made so they can be reviewed as text and rebuilt
byte-for-byte: timestamps and document ids are pinned (reportlab ``invariant``, fixed docx core
properties and zip entry dates). Headings become PDF outline entries / Word heading styles so the
parsers can recover section paths. Run from the repo root::

    .venv/bin/python samples/make_binary_samples.py
"""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from pathlib import Path
from typing import Any

import docx
from reportlab import rl_config
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import (
    BaseDocTemplate,
    Frame,
    PageBreak,
    PageTemplate,
    Paragraph,
    Spacer,
    Table,
    TableStyle,
)

HERE = Path(__file__).resolve().parent
FIXED_TIME = dt.datetime(2025, 1, 6, 9, 0, 0)

# A document is a title plus blocks: ("h1"|"h2", text), ("p", text), ("ul", [items]),
# ("table", [[cells]]), ("pagebreak", "").
Block = tuple[str, Any]

R7_SPEC: list[Block] = [
    ("p", "Document AR-R7-TS-04. Applies to R7 arms with serial numbers from R7-2300 onwards."),
    ("h1", "Overview"),
    (
        "p",
        "The Acme R7 is a six-axis collaborative robot arm for machine tending, packaging, "
        "screwdriving and light assembly. It combines joint torque sensing in every axis with a "
        "compact controller, so it can work next to people without fencing after a risk assessment.",
    ),
    ("h1", "Mechanical specifications"),
    (
        "table",
        [
            ["Property", "Value"],
            ["Payload", "7 kg"],
            ["Reach", "900 mm"],
            ["Degrees of freedom", "6 rotating joints"],
            ["Pose repeatability", "±0.03 mm (ISO 9283)"],
            ["Weight of arm", "22.5 kg"],
            ["Footprint", "Ø 160 mm base flange"],
            ["Ingress protection", "IP54"],
            ["Maximum tool speed", "2 m/s"],
        ],
    ),
    ("h2", "Joint ranges"),
    (
        "p",
        "Base, shoulder and elbow joints rotate ±360°. The three wrist joints rotate ±360° with "
        "infinite rotation available on the last wrist joint when the tool cable is routed "
        "externally. Maximum joint speed is 180°/s for the base and shoulder and 225°/s for the "
        "wrist joints.",
    ),
    ("h1", "Electrical and controller"),
    (
        "p",
        "The R7 controller accepts 100–240 V AC at 50/60 Hz and draws about 250 W in typical "
        "operation. It provides 16 digital inputs, 16 digital outputs, 2 analogue inputs and 2 "
        "analogue outputs, plus EtherNet/IP, PROFINET and Modbus TCP. The tool flange offers 24 V at "
        "up to 2 A and an 8-pin connector.",
    ),
    ("pagebreak", ""),
    ("h1", "Safety functions"),
    (
        "p",
        "The R7 provides 17 configurable safety functions, including joint position and speed "
        "limits, tool orientation limits, reduced mode triggered by an area scanner, and a safe "
        "home position. Safety functions are certified to PLd Category 3 (EN ISO 13849-1). A "
        "protective stop is triggered within 10 ms of detecting unexpected contact.",
    ),
    ("h2", "Stopping distances"),
    (
        "p",
        "At full payload, maximum reach and maximum speed, the stopping distance of the shoulder "
        "joint is 380 mm and the stopping time 450 ms. Integrators must use the stopping distance "
        "tables in the safety manual when calculating separation distances.",
    ),
    ("h1", "Environment"),
    (
        "p",
        "Operating temperature 0–50 °C, humidity up to 90% non-condensing. The arm can be mounted "
        "on the floor, ceiling or wall at any angle. Noise emission is below 65 dB(A).",
    ),
]

FALCON_MEMO: list[Block] = [
    ("title", "Project Falcon: acquisition of Lumen Vision B.V."),
    (
        "p",
        "Strictly confidential. Executive team only. Do not forward. Prepared by Corporate "
        "Development for the executive meeting of 3 March 2025.",
    ),
    ("h1", "Summary"),
    (
        "p",
        "We recommend acquiring Lumen Vision B.V., a 34-person machine-vision company in Delft, for "
        "an enterprise value of 38 million USD: 26 million USD in cash at closing and up to 12 "
        "million USD in earn-out tied to shipping integrated vision on the R7 by the end of 2026. "
        "Lumen's 3D bin-picking software would let the R7 compete for the random bin-picking "
        "applications we currently lose to larger vendors.",
    ),
    ("h1", "Strategic rationale"),
    (
        "p",
        "Roughly a third of lost R7 deals in 2024 cited missing integrated vision. Lumen already "
        "supports the R7 through a third-party plugin and has eleven joint customers with us. "
        "Owning the vision stack would raise the average R7 cell value by an estimated 18,000 USD.",
    ),
    ("h1", "Valuation"),
    (
        "table",
        [
            ["Item", "Value"],
            ["Enterprise value", "38.0 million USD"],
            ["Cash at closing", "26.0 million USD"],
            ["Earn-out (maximum)", "12.0 million USD"],
            ["Lumen 2024 revenue", "6.1 million USD"],
            ["Implied EV / revenue", "6.2x"],
        ],
    ),
    ("h1", "Risks"),
    ("h2", "Key people"),
    (
        "p",
        "Lumen's value depends on its two founders and four senior engineers. Retention packages of "
        "1.5 million USD over three years are included in the price.",
    ),
    ("h2", "Integration"),
    (
        "p",
        "Lumen runs its own cloud licensing service that would need to move into Acme Cloud within "
        "12 months. Engineering estimates two teams for two quarters.",
    ),
    ("h1", "Next steps"),
    (
        "ul",
        [
            "Board approval to sign a non-binding letter of intent at the March board meeting.",
            "Four-week confirmatory due diligence led by Legal and Finance.",
            "Target signing in May 2025 and closing in June 2025.",
        ],
    ),
]

REMOTE_WORK: list[Block] = [
    ("title", "Remote and hybrid work policy"),
    (
        "p",
        "Acme Robotics is a hybrid company. Many roles can be done from anywhere; roles that need "
        "hands on hardware cannot. This policy explains who can work remotely and how.",
    ),
    ("h1", "Eligibility"),
    (
        "p",
        "Software, design, sales, finance and People Operations roles may be fully remote within a "
        "country where Acme has a legal entity (the United States and the Netherlands). Lab, "
        "assembly, field service and hardware engineering roles are site-based, with up to two "
        "remote days a week when work allows.",
    ),
    ("h1", "Working from another country"),
    (
        "p",
        "You may work from a country where Acme has no entity for up to 20 working days per "
        "calendar year, in blocks of at most 10 consecutive working days. Register the trip in the "
        "HR portal first; some countries are excluded for tax or export-control reasons.",
    ),
    ("h1", "Home office"),
    (
        "p",
        "Remote employees receive a one-time setup allowance of 750 USD in their first month, in "
        "addition to the standard equipment from IT and the annual home-office allowance.",
    ),
    ("h1", "Team days"),
    (
        "p",
        "Every team meets in person at least once a quarter. Travel for team days is paid under "
        "the travel policy and does not count against your team's travel budget.",
    ),
    (
        "table",
        [
            ["Role family", "Default arrangement", "Remote days"],
            ["Software and design", "Remote or hybrid", "Any"],
            ["Hardware engineering", "Site-based", "Up to 2 per week"],
            ["Field service", "Customer sites", "Not applicable"],
        ],
    ),
]

DRIVER_POLICY: list[Block] = [
    ("title", "Globex driver policy"),
    (
        "p",
        "Applies to every employed driver and to subcontracted drivers while operating Globex "
        "vehicles or carrying Globex freight.",
    ),
    ("h1", "Licences and checks"),
    (
        "p",
        "Drivers must hold a valid licence for the vehicle class and a current driver qualification "
        "card. Licences are checked at hiring and every six months against the licensing authority. "
        "Drivers must report any new penalty points, suspension or medical condition affecting "
        "driving within 48 hours.",
    ),
    ("h1", "Driving and rest hours"),
    (
        "p",
        "Drivers may drive for a maximum of 9 hours per day, extendable to 10 hours twice a week, "
        "and no more than 56 hours in a week or 90 hours in any two consecutive weeks. After 4.5 "
        "hours of driving, a break of at least 45 minutes is mandatory. Daily rest is at least 11 "
        "consecutive hours.",
    ),
    (
        "table",
        [
            ["Limit", "Value"],
            ["Daily driving", "9 h (10 h twice a week)"],
            ["Weekly driving", "56 h"],
            ["Two-week driving", "90 h"],
            ["Break after 4.5 h", "45 min"],
            ["Daily rest", "11 h"],
        ],
    ),
    ("h1", "Alcohol, drugs and phones"),
    (
        "p",
        "Zero tolerance: no alcohol or drugs within 12 hours before or during a shift. Random tests "
        "are carried out at depots. Handheld phone use while the engine is running is forbidden; "
        "the navigation tablet may only be operated when parked.",
    ),
    ("h1", "Accidents"),
    (
        "p",
        "Stop, make the scene safe, call emergency services if anyone is hurt, and then call the "
        "24/7 fleet desk. Never admit liability at the scene. Photograph the vehicles, the road and "
        "any damage, and complete the accident report before the end of the shift.",
    ),
    ("h1", "Fuel cards"),
    (
        "p",
        "Fuel cards may only be used for the assigned vehicle. Enter the odometer reading at every "
        "fill. Misuse of a fuel card is treated as theft.",
    ),
]

HAZMAT_QUICK_REF: list[Block] = [
    (
        "p",
        "Dangerous goods quick reference for Globex warehouse staff. This sheet does not replace "
        "dangerous goods training; only trained staff may accept or load dangerous goods.",
    ),
    (
        "p",
        "Accepting shipments: check that every package shows the UN number, proper shipping name, "
        "hazard label and orientation arrows where required. Refuse any package that is leaking, "
        "damaged, or missing its dangerous goods declaration. Lithium batteries shipped alone "
        "(UN3480) are only accepted on freight services, never on Express parcel services.",
    ),
    ("pagebreak", ""),
    (
        "p",
        "Segregation: keep class 3 flammable liquids at least 3 metres from class 5.1 oxidisers. "
        "Corrosives (class 8) are stored on the lowest racking level with spill trays. Never store "
        "dangerous goods in the cross-dock lanes overnight.",
    ),
    (
        "p",
        "Spills: evacuate the immediate area, keep people upwind, and call the site emergency "
        "coordinator on extension 999. Only trained responders use the spill kits. Report every "
        "spill, however small, on the incident form.",
    ),
    (
        "p",
        "Training: dangerous goods awareness training is refreshed every two years. Staff who load "
        "dangerous goods onto vehicles need the full handler course, refreshed annually.",
    ),
]


def _fixed_zip(data: bytes) -> bytes:
    """Rewrite a zip with pinned entry dates so regenerated files are byte-identical."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            pinned = zipfile.ZipInfo(info.filename, date_time=FIXED_TIME.timetuple()[:6])
            pinned.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(pinned, src.read(info.filename))
    return out.getvalue()


def write_docx(path: Path, blocks: list[Block], *, author: str) -> None:
    document = docx.Document()
    props = document.core_properties
    props.author = author
    props.last_modified_by = author
    props.created = FIXED_TIME
    props.modified = FIXED_TIME
    props.last_printed = FIXED_TIME
    props.revision = 1
    for kind, value in blocks:
        if kind == "title":
            props.title = value
            document.add_paragraph(value, style="Title")
        elif kind in ("h1", "h2"):
            document.add_heading(value, level=int(kind[1]))
        elif kind == "p":
            document.add_paragraph(value)
        elif kind == "ul":
            for item in value:
                document.add_paragraph(item, style="List Bullet")
        elif kind == "table":
            table = document.add_table(rows=len(value), cols=len(value[0]))
            table.style = "Table Grid"
            for r, row in enumerate(value):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        elif kind == "pagebreak":
            document.add_page_break()  # type: ignore[no-untyped-call]
    buf = io.BytesIO()
    document.save(buf)
    path.write_bytes(_fixed_zip(buf.getvalue()))


class _OutlinedDoc(BaseDocTemplate):  # type: ignore[misc]
    """Adds a PDF bookmark for every heading paragraph, nested by heading level."""

    def __init__(self, filename: Any, **kw: Any) -> None:
        super().__init__(filename, **kw)
        frame = Frame(self.leftMargin, self.bottomMargin, self.width, self.height, id="body")
        self.addPageTemplates([PageTemplate(id="page", frames=[frame])])
        self._n = 0

    def afterFlowable(self, flowable: Any) -> None:  # noqa: N802 (reportlab's hook name)
        level = getattr(flowable, "outline_level", None)
        if level is None:
            return
        self._n += 1
        key = f"h{self._n}"
        self.canv.bookmarkPage(key)
        self.canv.addOutlineEntry(flowable.getPlainText(), key, level=level, closed=False)


def write_pdf(path: Path, blocks: list[Block], *, title: str, author: str) -> None:
    rl_config.invariant = 1
    styles = getSampleStyleSheet()
    story: list[Any] = []
    for kind, value in blocks:
        if kind in ("h1", "h2"):
            heading = Paragraph(value, styles["Heading1" if kind == "h1" else "Heading2"])
            heading.outline_level = 0 if kind == "h1" else 1
            story.append(heading)
        elif kind == "p":
            story.extend([Paragraph(value, styles["BodyText"]), Spacer(1, 0.2 * cm)])
        elif kind == "table":
            table = Table(value, hAlign="LEFT")
            table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, "#888888")]))
            story.extend([table, Spacer(1, 0.3 * cm)])
        elif kind == "pagebreak":
            story.append(PageBreak())
    buf = io.BytesIO()
    doc = _OutlinedDoc(buf, pagesize=A4, title=title, author=author, invariant=1)
    doc.build(story)
    path.write_bytes(buf.getvalue())


def main() -> None:
    acme, globex = HERE / "acme", HERE / "globex"
    write_pdf(
        acme / "r7-technical-specification.pdf",
        R7_SPEC,
        title="Acme R7 technical specification",
        author="Acme Robotics Product Management",
    )
    write_docx(acme / "project-falcon-memo.docx", FALCON_MEMO, author="Acme Corporate Development")
    write_docx(acme / "remote-work-policy.docx", REMOTE_WORK, author="Acme People Operations")
    write_docx(globex / "driver-policy.docx", DRIVER_POLICY, author="Globex Fleet Safety")
    write_pdf(
        globex / "hazmat-quick-reference.pdf",
        HAZMAT_QUICK_REF,
        title="Dangerous goods quick reference",
        author="Globex Warehouse Safety",
    )
    for path in sorted(HERE.glob("*/*")):
        if path.suffix in (".pdf", ".docx"):
            print(f"{path.relative_to(HERE)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
