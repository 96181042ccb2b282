//! The gate's own pages in the waiting room's languages: the same twelve as the
//! room's page (queue-api's `static/i18n/`), every visible string of a gate page by
//! [`Msg`]. A page's language is the `lang` cookie when it names one (a site that
//! lets people pick a language can set it), else the best match of
//! `Accept-Language`, else English. Only the HTML pages are translated: the JSON
//! answers keep their English `message` for programs.
//!
//! Adding a language: a table below (every `Msg`, the unit tests hold it complete),
//! its row in [`LANGUAGES`], and the same tag's file in queue-api's `static/i18n/`.

use axum::http::{header, HeaderMap};

macro_rules! messages {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Every string a gate page shows.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Msg {
            $($(#[doc = $doc])* $name,)*
        }

        impl Msg {
            /// Every message, in declaration order.
            pub const ALL: &'static [Msg] = &[$(Msg::$name,)*];
        }
    };
}

messages! {
    /// The title of the page that goes with a redirect.
    Moved,
    /// The link on that page.
    Continue,
    /// The title of the page sending a visitor to the waiting room.
    ToWaitingRoomTitle,
    /// Why they are sent there.
    ToWaitingRoom,
    /// The link to the waiting room.
    GoToWaitingRoom,
    /// The title of the page asking whether to leave (`/gate/leave` from elsewhere).
    LeaveTitle,
    /// The question on it.
    LeaveQuestion,
    /// Its button.
    LeaveButton,
    /// The title of an error page.
    ErrorTitle,
    /// The title of a page asking to try again shortly (503).
    WaitTitle,
    /// A `/gate/` link whose query cannot be read (400).
    BadLink,
    /// A path that cannot be read or forwarded (400).
    BadPath,
    /// No such page (404).
    NotFound,
    /// The proxy in front or the gate is set up wrongly (the JSON answer says how).
    Misconfigured,
    /// A ticket claimed from another site's page (403).
    CrossSiteClaim,
    /// The link that claims it from here.
    ClaimHere,
    /// A leave asked by another site (403).
    CrossSiteLeave,
    /// Valkey away during a claim (503).
    StoreAway,
    /// A durable claim not confirmed yet; the page retries (503).
    NotDurable,
    /// The link that retries at once.
    TryAgainNow,
    /// A ticket unknown or used (401).
    InvalidTicket,
    /// A ticket expired (401).
    ExpiredTicket,
    /// Admitted already, elsewhere (409).
    AlreadyInside,
    /// The queue at its hard cap (503).
    Full,
    /// Any other refused claim (400).
    TicketRefused,
    /// The link back to the waiting room.
    BackToRoom,
    /// The app could not be reached (502).
    Unreachable,
    /// The app answered something the gate cannot pass on (502).
    BadAnswer,
    /// The app answered too late (504).
    Timeout,
}

/// One language: its tag (BCP 47, as the room's page names it) and its messages.
pub struct Language {
    pub tag: &'static str,
    messages: &'static [(Msg, &'static str)],
}

impl Language {
    /// The message in this language (English when this table lacks it; the tests
    /// hold every table complete).
    pub fn text(&self, msg: Msg) -> &'static str {
        lookup(self.messages, msg).or_else(|| lookup(EN, msg)).unwrap_or("")
    }

    /// The message in this language, when this table has it.
    pub fn has(&self, msg: Msg) -> bool {
        lookup(self.messages, msg).is_some_and(|t| !t.trim().is_empty())
    }
}

fn lookup(table: &[(Msg, &'static str)], msg: Msg) -> Option<&'static str> {
    table.iter().find(|(m, _)| *m == msg).map(|(_, t)| *t)
}

/// Every language, English first.
pub static LANGUAGES: &[Language] = &[
    Language { tag: "en", messages: EN },
    Language { tag: "ko", messages: KO },
    Language { tag: "ja", messages: JA },
    Language { tag: "zh-Hans", messages: ZH_HANS },
    Language { tag: "zh-Hant", messages: ZH_HANT },
    Language { tag: "es", messages: ES },
    Language { tag: "fr", messages: FR },
    Language { tag: "de", messages: DE },
    Language { tag: "pt", messages: PT },
    Language { tag: "vi", messages: VI },
    Language { tag: "th", messages: TH },
    Language { tag: "id", messages: ID },
];

/// The fallback language.
pub fn english() -> &'static Language {
    &LANGUAGES[0]
}

/// The language with this tag (`ko`, `ko-KR` and `KO` alike): the exact tag, else
/// its primary subtag; Chinese by script, else region (`zh-TW`, `zh-HK`, `zh-MO`,
/// `zh-Hant`: Traditional; `zh-CN`, `zh-SG`, `zh-Hans`, bare `zh`: Simplified).
pub fn find(tag: &str) -> Option<&'static Language> {
    service_kit::lang::resolve(tag, |t| LANGUAGES.iter().find(|l| l.tag.eq_ignore_ascii_case(t)))
}

/// The language of a page for this request: the `lang` cookie, else the
/// `Accept-Language` entry of highest weight that names one (ties in the header's
/// order, `q=0` never), else English.
pub fn choose(headers: &HeaderMap) -> &'static Language {
    if let Some(l) = service_kit::http::cookie(headers, "lang").and_then(find) {
        return l;
    }
    let accept = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or("");
    service_kit::lang::preferred(accept).into_iter().find_map(find).unwrap_or_else(english)
}

const EN: &[(Msg, &str)] = &[
    (Msg::Moved, "Moved"),
    (Msg::Continue, "Continue"),
    (Msg::ToWaitingRoomTitle, "To the waiting room"),
    (Msg::ToWaitingRoom, "This page has a waiting room."),
    (Msg::GoToWaitingRoom, "Go to the waiting room"),
    (Msg::LeaveTitle, "Leave"),
    (Msg::LeaveQuestion, "Do you want to leave? Your place inside goes to the next person in line."),
    (Msg::LeaveButton, "Leave"),
    (Msg::ErrorTitle, "Something went wrong"),
    (Msg::WaitTitle, "One moment, please"),
    (Msg::BadLink, "This link cannot be read."),
    (Msg::BadPath, "This address cannot be read."),
    (Msg::NotFound, "There is no such page."),
    (Msg::Misconfigured, "This site’s waiting room is not set up correctly. Please let the site’s owner know."),
    (Msg::CrossSiteClaim, "This ticket was sent here from another site; it is kept."),
    (Msg::ClaimHere, "Claim it here"),
    (Msg::CrossSiteLeave, "A session ends only from this site’s own pages."),
    (
        Msg::StoreAway,
        "Your ticket is kept, but the waiting room cannot be reached right now. Please try again in a moment.",
    ),
    (Msg::NotDurable, "Your admission is being saved; this page tries again in a moment."),
    (Msg::TryAgainNow, "Try again now"),
    (Msg::InvalidTicket, "This ticket is unknown or was already used."),
    (Msg::ExpiredTicket, "This ticket has expired; please queue again."),
    (Msg::AlreadyInside, "You are already inside (in another tab or device)."),
    (Msg::Full, "It is full right now; your ticket is kept, try again shortly."),
    (Msg::TicketRefused, "This ticket cannot be used."),
    (Msg::BackToRoom, "Back to the waiting room"),
    (Msg::Unreachable, "The site behind the waiting room could not be reached. Please try again in a moment."),
    (Msg::BadAnswer, "The site behind the waiting room answered in an unexpected way."),
    (Msg::Timeout, "The site behind the waiting room took too long to answer. Please try again in a moment."),
];

const KO: &[(Msg, &str)] = &[
    (Msg::Moved, "이동"),
    (Msg::Continue, "계속"),
    (Msg::ToWaitingRoomTitle, "대기실로 이동"),
    (Msg::ToWaitingRoom, "이 페이지에는 대기실이 있습니다."),
    (Msg::GoToWaitingRoom, "대기실로 가기"),
    (Msg::LeaveTitle, "나가기"),
    (Msg::LeaveQuestion, "나가시겠습니까? 입장한 자리는 줄의 다음 분께 넘어갑니다."),
    (Msg::LeaveButton, "나가기"),
    (Msg::ErrorTitle, "문제가 발생했습니다"),
    (Msg::WaitTitle, "잠시만 기다려 주세요"),
    (Msg::BadLink, "이 링크를 읽을 수 없습니다."),
    (Msg::BadPath, "이 주소를 읽을 수 없습니다."),
    (Msg::NotFound, "없는 페이지입니다."),
    (Msg::Misconfigured, "이 사이트의 대기실이 올바르게 설정되지 않았습니다. 사이트 운영자에게 알려 주세요."),
    (Msg::CrossSiteClaim, "이 입장권은 다른 사이트에서 보내졌습니다. 입장권은 그대로 유지됩니다."),
    (Msg::ClaimHere, "여기에서 입장하기"),
    (Msg::CrossSiteLeave, "세션은 이 사이트의 페이지에서만 끝낼 수 있습니다."),
    (Msg::StoreAway, "입장권은 유지되지만 지금은 대기실에 연결할 수 없습니다. 잠시 후 다시 시도해 주세요."),
    (Msg::NotDurable, "입장 정보를 저장하는 중입니다. 이 페이지가 잠시 후 다시 시도합니다."),
    (Msg::TryAgainNow, "지금 다시 시도"),
    (Msg::InvalidTicket, "알 수 없거나 이미 사용된 입장권입니다."),
    (Msg::ExpiredTicket, "입장권이 만료되었습니다. 다시 줄을 서 주세요."),
    (Msg::AlreadyInside, "이미 입장했습니다 (다른 탭이나 기기에서)."),
    (Msg::Full, "지금은 자리가 가득 찼습니다. 입장권은 유지되니 잠시 후 다시 시도해 주세요."),
    (Msg::TicketRefused, "이 입장권은 사용할 수 없습니다."),
    (Msg::BackToRoom, "대기실로 돌아가기"),
    (Msg::Unreachable, "대기실 뒤의 사이트에 연결할 수 없습니다. 잠시 후 다시 시도해 주세요."),
    (Msg::BadAnswer, "대기실 뒤의 사이트가 예상하지 못한 응답을 보냈습니다."),
    (Msg::Timeout, "대기실 뒤의 사이트가 너무 오래 응답하지 않습니다. 잠시 후 다시 시도해 주세요."),
];

const JA: &[(Msg, &str)] = &[
    (Msg::Moved, "移動"),
    (Msg::Continue, "続ける"),
    (Msg::ToWaitingRoomTitle, "待合室へ"),
    (Msg::ToWaitingRoom, "このページには待合室があります。"),
    (Msg::GoToWaitingRoom, "待合室へ進む"),
    (Msg::LeaveTitle, "退出"),
    (Msg::LeaveQuestion, "退出しますか？あなたの入場枠は列の次の方に移ります。"),
    (Msg::LeaveButton, "退出する"),
    (Msg::ErrorTitle, "問題が発生しました"),
    (Msg::WaitTitle, "少々お待ちください"),
    (Msg::BadLink, "このリンクは読み取れません。"),
    (Msg::BadPath, "このアドレスは読み取れません。"),
    (Msg::NotFound, "そのようなページはありません。"),
    (Msg::Misconfigured, "このサイトの待合室は正しく設定されていません。サイトの運営者にお知らせください。"),
    (Msg::CrossSiteClaim, "このチケットは別のサイトから送られてきました。チケットは保持されています。"),
    (Msg::ClaimHere, "ここで受け取る"),
    (Msg::CrossSiteLeave, "セッションはこのサイト自身のページからのみ終了できます。"),
    (
        Msg::StoreAway,
        "チケットは保持されていますが、現在待合室に接続できません。少し待ってから、もう一度お試しください。",
    ),
    (Msg::NotDurable, "入場情報を保存しています。このページは少ししてから自動で再試行します。"),
    (Msg::TryAgainNow, "今すぐ再試行"),
    (Msg::InvalidTicket, "このチケットは不明か、すでに使用されています。"),
    (Msg::ExpiredTicket, "このチケットは有効期限が切れています。もう一度並んでください。"),
    (Msg::AlreadyInside, "すでに入場済みです（別のタブまたは端末で）。"),
    (Msg::Full, "現在満員です。チケットは保持されています。少ししてから、もう一度お試しください。"),
    (Msg::TicketRefused, "このチケットは使用できません。"),
    (Msg::BackToRoom, "待合室に戻る"),
    (Msg::Unreachable, "待合室の先のサイトに接続できませんでした。少し待ってから、もう一度お試しください。"),
    (Msg::BadAnswer, "待合室の先のサイトから予期しない応答がありました。"),
    (Msg::Timeout, "待合室の先のサイトの応答に時間がかかりすぎています。少し待ってから、もう一度お試しください。"),
];

const ZH_HANS: &[(Msg, &str)] = &[
    (Msg::Moved, "已移动"),
    (Msg::Continue, "继续"),
    (Msg::ToWaitingRoomTitle, "前往等候室"),
    (Msg::ToWaitingRoom, "此页面设有等候室。"),
    (Msg::GoToWaitingRoom, "前往等候室"),
    (Msg::LeaveTitle, "离开"),
    (Msg::LeaveQuestion, "确定要离开吗？您的入场名额将让给队伍中的下一位。"),
    (Msg::LeaveButton, "离开"),
    (Msg::ErrorTitle, "出错了"),
    (Msg::WaitTitle, "请稍候"),
    (Msg::BadLink, "无法读取此链接。"),
    (Msg::BadPath, "无法读取此地址。"),
    (Msg::NotFound, "没有这个页面。"),
    (Msg::Misconfigured, "本网站的等候室设置有误。请告知网站管理员。"),
    (Msg::CrossSiteClaim, "此入场券是从其他网站发送过来的；入场券仍为您保留。"),
    (Msg::ClaimHere, "在此领取"),
    (Msg::CrossSiteLeave, "只能从本网站自己的页面结束会话。"),
    (Msg::StoreAway, "您的入场券仍为您保留，但目前无法连接等候室。请稍后再试。"),
    (Msg::NotDurable, "正在保存您的入场信息；此页面稍后会自动重试。"),
    (Msg::TryAgainNow, "立即重试"),
    (Msg::InvalidTicket, "此入场券未知或已被使用。"),
    (Msg::ExpiredTicket, "此入场券已过期；请重新排队。"),
    (Msg::AlreadyInside, "您已经进入（在其他标签页或设备上）。"),
    (Msg::Full, "目前已满；您的入场券仍为您保留，请稍后再试。"),
    (Msg::TicketRefused, "此入场券无法使用。"),
    (Msg::BackToRoom, "返回等候室"),
    (Msg::Unreachable, "无法连接到等候室后面的网站。请稍后再试。"),
    (Msg::BadAnswer, "等候室后面的网站返回了意外的响应。"),
    (Msg::Timeout, "等候室后面的网站响应时间过长。请稍后再试。"),
];

const ZH_HANT: &[(Msg, &str)] = &[
    (Msg::Moved, "已移動"),
    (Msg::Continue, "繼續"),
    (Msg::ToWaitingRoomTitle, "前往等候室"),
    (Msg::ToWaitingRoom, "此頁面設有等候室。"),
    (Msg::GoToWaitingRoom, "前往等候室"),
    (Msg::LeaveTitle, "離開"),
    (Msg::LeaveQuestion, "確定要離開嗎？您的入場名額將讓給隊伍中的下一位。"),
    (Msg::LeaveButton, "離開"),
    (Msg::ErrorTitle, "發生錯誤"),
    (Msg::WaitTitle, "請稍候"),
    (Msg::BadLink, "無法讀取此連結。"),
    (Msg::BadPath, "無法讀取此網址。"),
    (Msg::NotFound, "沒有這個頁面。"),
    (Msg::Misconfigured, "本網站的等候室設定有誤。請告知網站管理員。"),
    (Msg::CrossSiteClaim, "此入場券是從其他網站傳送過來的；入場券仍為您保留。"),
    (Msg::ClaimHere, "在此領取"),
    (Msg::CrossSiteLeave, "只能從本網站自己的頁面結束工作階段。"),
    (Msg::StoreAway, "您的入場券仍為您保留，但目前無法連線到等候室。請稍後再試。"),
    (Msg::NotDurable, "正在儲存您的入場資訊；此頁面稍後會自動重試。"),
    (Msg::TryAgainNow, "立即重試"),
    (Msg::InvalidTicket, "此入場券不明或已被使用。"),
    (Msg::ExpiredTicket, "此入場券已過期；請重新排隊。"),
    (Msg::AlreadyInside, "您已經進入（在其他分頁或裝置上）。"),
    (Msg::Full, "目前已滿；您的入場券仍為您保留，請稍後再試。"),
    (Msg::TicketRefused, "此入場券無法使用。"),
    (Msg::BackToRoom, "返回等候室"),
    (Msg::Unreachable, "無法連線到等候室後方的網站。請稍後再試。"),
    (Msg::BadAnswer, "等候室後方的網站傳回了非預期的回應。"),
    (Msg::Timeout, "等候室後方的網站回應時間過長。請稍後再試。"),
];

const ES: &[(Msg, &str)] = &[
    (Msg::Moved, "Redirigiendo"),
    (Msg::Continue, "Continuar"),
    (Msg::ToWaitingRoomTitle, "A la sala de espera"),
    (Msg::ToWaitingRoom, "Esta página tiene una sala de espera."),
    (Msg::GoToWaitingRoom, "Ir a la sala de espera"),
    (Msg::LeaveTitle, "Salir"),
    (Msg::LeaveQuestion, "¿Quieres salir? Tu lugar dentro pasa a la siguiente persona de la fila."),
    (Msg::LeaveButton, "Salir"),
    (Msg::ErrorTitle, "Algo salió mal"),
    (Msg::WaitTitle, "Un momento, por favor"),
    (Msg::BadLink, "No se puede leer este enlace."),
    (Msg::BadPath, "No se puede leer esta dirección."),
    (Msg::NotFound, "No existe esta página."),
    (Msg::Misconfigured, "La sala de espera de este sitio no está bien configurada. Avisa al responsable del sitio."),
    (Msg::CrossSiteClaim, "Esta entrada se envió aquí desde otro sitio; se conserva."),
    (Msg::ClaimHere, "Canjéala aquí"),
    (Msg::CrossSiteLeave, "Una sesión solo se cierra desde las páginas de este sitio."),
    (Msg::StoreAway, "Tu entrada se conserva, pero ahora no se puede conectar con la sala de espera. Inténtalo de nuevo en un momento."),
    (Msg::NotDurable, "Se está guardando tu admisión; esta página lo volverá a intentar en un momento."),
    (Msg::TryAgainNow, "Reintentar ahora"),
    (Msg::InvalidTicket, "Esta entrada no existe o ya se ha usado."),
    (Msg::ExpiredTicket, "Esta entrada ha caducado; vuelve a hacer fila."),
    (Msg::AlreadyInside, "Ya estás dentro (en otra pestaña o dispositivo)."),
    (Msg::Full, "Ahora mismo está lleno; tu entrada se conserva, inténtalo de nuevo en breve."),
    (Msg::TicketRefused, "Esta entrada no se puede usar."),
    (Msg::BackToRoom, "Volver a la sala de espera"),
    (Msg::Unreachable, "No se pudo conectar con el sitio que hay detrás de la sala de espera. Inténtalo de nuevo en un momento."),
    (Msg::BadAnswer, "El sitio que hay detrás de la sala de espera respondió de forma inesperada."),
    (Msg::Timeout, "El sitio que hay detrás de la sala de espera tardó demasiado en responder. Inténtalo de nuevo en un momento."),
];

const FR: &[(Msg, &str)] = &[
    (Msg::Moved, "Redirection"),
    (Msg::Continue, "Continuer"),
    (Msg::ToWaitingRoomTitle, "Vers la salle d’attente"),
    (Msg::ToWaitingRoom, "Cette page a une salle d’attente."),
    (Msg::GoToWaitingRoom, "Aller à la salle d’attente"),
    (Msg::LeaveTitle, "Quitter"),
    (Msg::LeaveQuestion, "Voulez-vous partir ? Votre place à l’intérieur ira à la personne suivante dans la file."),
    (Msg::LeaveButton, "Quitter"),
    (Msg::ErrorTitle, "Une erreur s’est produite"),
    (Msg::WaitTitle, "Un instant, s’il vous plaît"),
    (Msg::BadLink, "Ce lien est illisible."),
    (Msg::BadPath, "Cette adresse est illisible."),
    (Msg::NotFound, "Cette page n’existe pas."),
    (Msg::Misconfigured, "La salle d’attente de ce site est mal configurée. Merci de prévenir le responsable du site."),
    (Msg::CrossSiteClaim, "Ce ticket a été envoyé ici depuis un autre site ; il est conservé."),
    (Msg::ClaimHere, "L’utiliser ici"),
    (Msg::CrossSiteLeave, "Une session ne se termine que depuis les pages de ce site."),
    (
        Msg::StoreAway,
        "Votre ticket est conservé, mais la salle d’attente est injoignable pour le moment. Réessayez dans un instant.",
    ),
    (Msg::NotDurable, "Votre admission est en cours d’enregistrement ; cette page réessaiera dans un instant."),
    (Msg::TryAgainNow, "Réessayer maintenant"),
    (Msg::InvalidTicket, "Ce ticket est inconnu ou a déjà été utilisé."),
    (Msg::ExpiredTicket, "Ce ticket a expiré ; refaites la queue."),
    (Msg::AlreadyInside, "Vous êtes déjà entré (dans un autre onglet ou sur un autre appareil)."),
    (Msg::Full, "C’est complet pour le moment ; votre ticket est conservé, réessayez bientôt."),
    (Msg::TicketRefused, "Ce ticket ne peut pas être utilisé."),
    (Msg::BackToRoom, "Retour à la salle d’attente"),
    (Msg::Unreachable, "Le site derrière la salle d’attente est injoignable. Réessayez dans un instant."),
    (Msg::BadAnswer, "Le site derrière la salle d’attente a répondu de façon inattendue."),
    (Msg::Timeout, "Le site derrière la salle d’attente a mis trop de temps à répondre. Réessayez dans un instant."),
];

const DE: &[(Msg, &str)] = &[
    (Msg::Moved, "Weiterleitung"),
    (Msg::Continue, "Weiter"),
    (Msg::ToWaitingRoomTitle, "Zum Warteraum"),
    (Msg::ToWaitingRoom, "Diese Seite hat einen Warteraum."),
    (Msg::GoToWaitingRoom, "Zum Warteraum gehen"),
    (Msg::LeaveTitle, "Verlassen"),
    (Msg::LeaveQuestion, "Möchten Sie gehen? Ihr Platz drinnen geht an die nächste Person in der Warteschlange."),
    (Msg::LeaveButton, "Verlassen"),
    (Msg::ErrorTitle, "Etwas ist schiefgelaufen"),
    (Msg::WaitTitle, "Einen Moment bitte"),
    (Msg::BadLink, "Dieser Link kann nicht gelesen werden."),
    (Msg::BadPath, "Diese Adresse kann nicht gelesen werden."),
    (Msg::NotFound, "Diese Seite gibt es nicht."),
    (Msg::Misconfigured, "Der Warteraum dieser Website ist nicht richtig eingerichtet. Bitte informieren Sie den Betreiber der Website."),
    (Msg::CrossSiteClaim, "Dieses Ticket wurde von einer anderen Website hierher geschickt; es bleibt erhalten."),
    (Msg::ClaimHere, "Hier einlösen"),
    (Msg::CrossSiteLeave, "Eine Sitzung endet nur über die eigenen Seiten dieser Website."),
    (Msg::StoreAway, "Ihr Ticket bleibt erhalten, aber der Warteraum ist gerade nicht erreichbar. Versuchen Sie es gleich noch einmal."),
    (Msg::NotDurable, "Ihr Einlass wird gespeichert; diese Seite versucht es gleich erneut."),
    (Msg::TryAgainNow, "Jetzt erneut versuchen"),
    (Msg::InvalidTicket, "Dieses Ticket ist unbekannt oder wurde bereits verwendet."),
    (Msg::ExpiredTicket, "Dieses Ticket ist abgelaufen; bitte stellen Sie sich erneut an."),
    (Msg::AlreadyInside, "Sie sind bereits drin (in einem anderen Tab oder auf einem anderen Gerät)."),
    (Msg::Full, "Gerade ist alles voll; Ihr Ticket bleibt erhalten, versuchen Sie es gleich noch einmal."),
    (Msg::TicketRefused, "Dieses Ticket kann nicht verwendet werden."),
    (Msg::BackToRoom, "Zurück zum Warteraum"),
    (Msg::Unreachable, "Die Website hinter dem Warteraum ist nicht erreichbar. Versuchen Sie es gleich noch einmal."),
    (Msg::BadAnswer, "Die Website hinter dem Warteraum hat unerwartet geantwortet."),
    (Msg::Timeout, "Die Website hinter dem Warteraum hat zu lange für die Antwort gebraucht. Versuchen Sie es gleich noch einmal."),
];

const PT: &[(Msg, &str)] = &[
    (Msg::Moved, "Redirecionando"),
    (Msg::Continue, "Continuar"),
    (Msg::ToWaitingRoomTitle, "Para a sala de espera"),
    (Msg::ToWaitingRoom, "Esta página tem uma sala de espera."),
    (Msg::GoToWaitingRoom, "Ir para a sala de espera"),
    (Msg::LeaveTitle, "Sair"),
    (Msg::LeaveQuestion, "Deseja sair? Seu lugar lá dentro passa para a próxima pessoa da fila."),
    (Msg::LeaveButton, "Sair"),
    (Msg::ErrorTitle, "Algo deu errado"),
    (Msg::WaitTitle, "Um momento, por favor"),
    (Msg::BadLink, "Não é possível ler este link."),
    (Msg::BadPath, "Não é possível ler este endereço."),
    (Msg::NotFound, "Esta página não existe."),
    (
        Msg::Misconfigured,
        "A sala de espera deste site não está configurada corretamente. Avise o responsável pelo site.",
    ),
    (Msg::CrossSiteClaim, "Este ingresso foi enviado para cá a partir de outro site; ele continua guardado."),
    (Msg::ClaimHere, "Usar aqui"),
    (Msg::CrossSiteLeave, "Uma sessão só termina a partir das páginas deste site."),
    (
        Msg::StoreAway,
        "Seu ingresso continua guardado, mas a sala de espera está inacessível agora. Tente novamente em instantes.",
    ),
    (Msg::NotDurable, "Sua entrada está sendo registrada; esta página tentará de novo em instantes."),
    (Msg::TryAgainNow, "Tentar agora"),
    (Msg::InvalidTicket, "Este ingresso é desconhecido ou já foi usado."),
    (Msg::ExpiredTicket, "Este ingresso expirou; entre na fila novamente."),
    (Msg::AlreadyInside, "Você já está dentro (em outra aba ou dispositivo)."),
    (Msg::Full, "Está lotado no momento; seu ingresso continua guardado, tente novamente em breve."),
    (Msg::TicketRefused, "Este ingresso não pode ser usado."),
    (Msg::BackToRoom, "Voltar à sala de espera"),
    (Msg::Unreachable, "Não foi possível acessar o site por trás da sala de espera. Tente novamente em instantes."),
    (Msg::BadAnswer, "O site por trás da sala de espera respondeu de forma inesperada."),
    (Msg::Timeout, "O site por trás da sala de espera demorou demais para responder. Tente novamente em instantes."),
];

const VI: &[(Msg, &str)] = &[
    (Msg::Moved, "Đang chuyển hướng"),
    (Msg::Continue, "Tiếp tục"),
    (Msg::ToWaitingRoomTitle, "Đến phòng chờ"),
    (Msg::ToWaitingRoom, "Trang này có phòng chờ."),
    (Msg::GoToWaitingRoom, "Đến phòng chờ"),
    (Msg::LeaveTitle, "Rời đi"),
    (
        Msg::LeaveQuestion,
        "Bạn có muốn rời đi không? Chỗ của bạn bên trong sẽ được nhường cho người tiếp theo trong hàng.",
    ),
    (Msg::LeaveButton, "Rời đi"),
    (Msg::ErrorTitle, "Đã xảy ra lỗi"),
    (Msg::WaitTitle, "Vui lòng chờ một chút"),
    (Msg::BadLink, "Không đọc được liên kết này."),
    (Msg::BadPath, "Không đọc được địa chỉ này."),
    (Msg::NotFound, "Không có trang này."),
    (Msg::Misconfigured, "Phòng chờ của trang web này chưa được thiết lập đúng. Vui lòng báo cho chủ trang web."),
    (Msg::CrossSiteClaim, "Vé này được gửi đến đây từ một trang web khác; vé vẫn được giữ."),
    (Msg::ClaimHere, "Dùng vé tại đây"),
    (Msg::CrossSiteLeave, "Phiên chỉ kết thúc từ chính các trang của trang web này."),
    (Msg::StoreAway, "Vé của bạn vẫn được giữ, nhưng hiện không thể kết nối đến phòng chờ. Hãy thử lại sau giây lát."),
    (Msg::NotDurable, "Đang lưu lượt vào của bạn; trang này sẽ tự thử lại sau giây lát."),
    (Msg::TryAgainNow, "Thử lại ngay"),
    (Msg::InvalidTicket, "Vé này không xác định hoặc đã được sử dụng."),
    (Msg::ExpiredTicket, "Vé này đã hết hạn; hãy xếp hàng lại."),
    (Msg::AlreadyInside, "Bạn đã vào bên trong (ở một thẻ hoặc thiết bị khác)."),
    (Msg::Full, "Hiện đã hết chỗ; vé của bạn vẫn được giữ, hãy thử lại sau ít phút."),
    (Msg::TicketRefused, "Không thể dùng vé này."),
    (Msg::BackToRoom, "Quay lại phòng chờ"),
    (Msg::Unreachable, "Không thể kết nối đến trang web phía sau phòng chờ. Hãy thử lại sau giây lát."),
    (Msg::BadAnswer, "Trang web phía sau phòng chờ đã phản hồi theo cách không mong đợi."),
    (Msg::Timeout, "Trang web phía sau phòng chờ phản hồi quá lâu. Hãy thử lại sau giây lát."),
];

const TH: &[(Msg, &str)] = &[
    (Msg::Moved, "กำลังเปลี่ยนเส้นทาง"),
    (Msg::Continue, "ดำเนินการต่อ"),
    (Msg::ToWaitingRoomTitle, "ไปยังห้องรอ"),
    (Msg::ToWaitingRoom, "หน้านี้มีห้องรอ"),
    (Msg::GoToWaitingRoom, "ไปที่ห้องรอ"),
    (Msg::LeaveTitle, "ออก"),
    (Msg::LeaveQuestion, "คุณต้องการออกหรือไม่ ที่ของคุณด้านในจะตกเป็นของคนถัดไปในคิว"),
    (Msg::LeaveButton, "ออก"),
    (Msg::ErrorTitle, "เกิดข้อผิดพลาด"),
    (Msg::WaitTitle, "โปรดรอสักครู่"),
    (Msg::BadLink, "ไม่สามารถอ่านลิงก์นี้ได้"),
    (Msg::BadPath, "ไม่สามารถอ่านที่อยู่นี้ได้"),
    (Msg::NotFound, "ไม่มีหน้านี้"),
    (Msg::Misconfigured, "ห้องรอของเว็บไซต์นี้ตั้งค่าไม่ถูกต้อง โปรดแจ้งเจ้าของเว็บไซต์"),
    (Msg::CrossSiteClaim, "ตั๋วนี้ถูกส่งมาจากเว็บไซต์อื่น ตั๋วยังคงถูกเก็บไว้"),
    (Msg::ClaimHere, "ใช้ตั๋วที่นี่"),
    (Msg::CrossSiteLeave, "เซสชันจะสิ้นสุดได้จากหน้าของเว็บไซต์นี้เท่านั้น"),
    (Msg::StoreAway, "ตั๋วของคุณยังคงถูกเก็บไว้ แต่ขณะนี้ไม่สามารถเชื่อมต่อกับห้องรอได้ โปรดลองอีกครั้งในอีกสักครู่"),
    (Msg::NotDurable, "กำลังบันทึกสิทธิ์เข้าของคุณ หน้านี้จะลองอีกครั้งในอีกสักครู่"),
    (Msg::TryAgainNow, "ลองอีกครั้งตอนนี้"),
    (Msg::InvalidTicket, "ไม่รู้จักตั๋วนี้ หรือตั๋วนี้ถูกใช้ไปแล้ว"),
    (Msg::ExpiredTicket, "ตั๋วนี้หมดอายุแล้ว โปรดเข้าคิวใหม่"),
    (Msg::AlreadyInside, "คุณเข้าไปแล้ว (ในแท็บหรืออุปกรณ์อื่น)"),
    (Msg::Full, "ขณะนี้เต็มแล้ว ตั๋วของคุณยังคงถูกเก็บไว้ โปรดลองอีกครั้งในไม่ช้า"),
    (Msg::TicketRefused, "ไม่สามารถใช้ตั๋วนี้ได้"),
    (Msg::BackToRoom, "กลับไปที่ห้องรอ"),
    (Msg::Unreachable, "ไม่สามารถเชื่อมต่อกับเว็บไซต์ที่อยู่หลังห้องรอได้ โปรดลองอีกครั้งในอีกสักครู่"),
    (Msg::BadAnswer, "เว็บไซต์ที่อยู่หลังห้องรอตอบกลับมาในแบบที่ไม่คาดคิด"),
    (Msg::Timeout, "เว็บไซต์ที่อยู่หลังห้องรอใช้เวลาตอบนานเกินไป โปรดลองอีกครั้งในอีกสักครู่"),
];

const ID: &[(Msg, &str)] = &[
    (Msg::Moved, "Dialihkan"),
    (Msg::Continue, "Lanjutkan"),
    (Msg::ToWaitingRoomTitle, "Ke ruang tunggu"),
    (Msg::ToWaitingRoom, "Halaman ini memiliki ruang tunggu."),
    (Msg::GoToWaitingRoom, "Pergi ke ruang tunggu"),
    (Msg::LeaveTitle, "Keluar"),
    (
        Msg::LeaveQuestion,
        "Apakah Anda ingin keluar? Tempat Anda di dalam akan diberikan kepada orang berikutnya dalam antrean.",
    ),
    (Msg::LeaveButton, "Keluar"),
    (Msg::ErrorTitle, "Terjadi kesalahan"),
    (Msg::WaitTitle, "Mohon tunggu sebentar"),
    (Msg::BadLink, "Tautan ini tidak dapat dibaca."),
    (Msg::BadPath, "Alamat ini tidak dapat dibaca."),
    (Msg::NotFound, "Halaman ini tidak ada."),
    (Msg::Misconfigured, "Ruang tunggu situs ini tidak diatur dengan benar. Mohon beri tahu pemilik situs."),
    (Msg::CrossSiteClaim, "Tiket ini dikirim ke sini dari situs lain; tiket tetap disimpan."),
    (Msg::ClaimHere, "Gunakan di sini"),
    (Msg::CrossSiteLeave, "Sesi hanya dapat diakhiri dari halaman situs ini sendiri."),
    (
        Msg::StoreAway,
        "Tiket Anda tetap disimpan, tetapi ruang tunggu tidak dapat dihubungi saat ini. Coba lagi sesaat lagi.",
    ),
    (Msg::NotDurable, "Izin masuk Anda sedang disimpan; halaman ini akan mencoba lagi sesaat lagi."),
    (Msg::TryAgainNow, "Coba lagi sekarang"),
    (Msg::InvalidTicket, "Tiket ini tidak dikenal atau sudah dipakai."),
    (Msg::ExpiredTicket, "Tiket ini sudah kedaluwarsa; silakan antre lagi."),
    (Msg::AlreadyInside, "Anda sudah berada di dalam (di tab atau perangkat lain)."),
    (Msg::Full, "Saat ini penuh; tiket Anda tetap disimpan, coba lagi sebentar lagi."),
    (Msg::TicketRefused, "Tiket ini tidak dapat digunakan."),
    (Msg::BackToRoom, "Kembali ke ruang tunggu"),
    (Msg::Unreachable, "Situs di balik ruang tunggu tidak dapat dihubungi. Coba lagi sesaat lagi."),
    (Msg::BadAnswer, "Situs di balik ruang tunggu memberi jawaban yang tidak terduga."),
    (Msg::Timeout, "Situs di balik ruang tunggu terlalu lama menjawab. Coba lagi sesaat lagi."),
];

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn every_language_has_every_message() {
        for l in LANGUAGES {
            for &m in Msg::ALL {
                assert!(l.has(m), "the gate's {} table lacks {m:?}", l.tag);
            }
            assert_eq!(l.messages.len(), Msg::ALL.len(), "the gate's {} table holds a message twice", l.tag);
        }
    }

    #[test]
    fn the_languages_of_the_room() {
        let tags: Vec<_> = LANGUAGES.iter().map(|l| l.tag).collect();
        assert_eq!(tags, ["en", "ko", "ja", "zh-Hans", "zh-Hant", "es", "fr", "de", "pt", "vi", "th", "id"]);
    }

    fn chosen(accept: Option<&str>, cookie: Option<&str>) -> &'static str {
        let mut h = HeaderMap::new();
        if let Some(a) = accept {
            h.insert(header::ACCEPT_LANGUAGE, HeaderValue::from_str(a).unwrap());
        }
        if let Some(c) = cookie {
            h.insert(header::COOKIE, HeaderValue::from_str(c).unwrap());
        }
        choose(&h).tag
    }

    #[test]
    fn language_from_cookie_then_header_then_english() {
        assert_eq!(chosen(None, None), "en");
        assert_eq!(chosen(Some("ko-KR,ko;q=0.9,en;q=0.8"), None), "ko");
        assert_eq!(chosen(Some("sv, en;q=0.5, ja;q=0.8"), None), "ja", "by weight");
        assert_eq!(chosen(Some("ja;q=0, de"), None), "de", "q=0 means not wanted");
        assert_eq!(chosen(Some("sv, nl"), None), "en");
        assert_eq!(chosen(Some("ko"), Some("a=1; lang=fr")), "fr", "the cookie wins");
        assert_eq!(chosen(Some("ko"), Some("lang=xx")), "ko", "an unknown cookie is ignored");
        assert_eq!(chosen(Some(";;,,q="), None), "en");
    }

    #[test]
    fn chinese_by_script_then_region() {
        for t in ["zh", "zh-CN", "zh-SG", "zh-Hans", "zh-Hans-HK", "zh_cn"] {
            assert_eq!(chosen(Some(t), None), "zh-Hans", "{t}");
        }
        for t in ["zh-TW", "zh-HK", "zh-MO", "zh-Hant", "zh-hant-cn", "ZH-tw"] {
            assert_eq!(chosen(Some(t), None), "zh-Hant", "{t}");
        }
        assert_eq!(chosen(Some("zhx, pt-BR"), None), "pt");
    }
}
